"""Trust on first use, pinned: fetch the cluster CA from a master and keep it only if its
fingerprint is the one the operator gave (in a join token, or to `tcl login`).

The TLS handshake here is unverified on purpose (we do not have the CA yet); nothing is
sent over it. The chain the server presents must contain a certificate whose sha256
matches the pin, and that certificate must have signed the server's leaf."""

from __future__ import annotations

import socket
import ssl

from tcluster.security.certs import FINGERPRINT_PREFIX, der_to_pem, fingerprint_der
from tcluster.security.nodekeys import signed_by


class PinMismatch(Exception):
    """The master did not present the pinned CA: do not talk to it."""


class NotTls(PinMismatch):
    """The master did not complete a TLS handshake at all (it speaks plaintext there)."""


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{address[:80]!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def normalize_fingerprint(fingerprint: str) -> str:
    """`sha256:<64 hex>` whether given with or without the prefix; ValueError otherwise."""
    hexpart = fingerprint.lower().removeprefix(FINGERPRINT_PREFIX)
    if len(hexpart) != 64 or any(c not in "0123456789abcdef" for c in hexpart):
        raise ValueError("a CA fingerprint is sha256: followed by 64 hex digits")
    return FINGERPRINT_PREFIX + hexpart


def _server_chain(address: str, timeout_s: float) -> list[bytes]:
    """The DER of each certificate the server presents, its leaf first."""
    host, port = split_address(address)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])   # gRPC servers refuse a handshake without it
    with socket.create_connection((host, port), timeout=timeout_s) as raw:
        with context.wrap_socket(raw, server_hostname=None) as tls:
            # CPython 3.11 keeps the unverified chain on the internal object only (typeshed omits `_sslobj`).
            chain = tls._sslobj.get_unverified_chain() or []  # type: ignore[attr-defined]
            ders = [c.public_bytes(ssl._ssl.ENCODING_DER) if hasattr(c, "public_bytes") else c  # type: ignore[attr-defined]
                    for c in chain]
    return [bytes(d) for d in ders]


def fetch_pinned_ca(address: str, fingerprint: str, timeout_s: float = 10.0) -> bytes:
    """The PEM of the CA the master at `address` presents, if its sha256 is `fingerprint`.
    Raises PinMismatch (the master is not who the token says) or OSError (unreachable)."""
    pin = normalize_fingerprint(fingerprint)
    try:
        chain = _server_chain(address, timeout_s)
    except ssl.SSLError as error:
        raise NotTls(f"the master at {address} did not complete a TLS handshake ({error.reason or error}); "
                          "is it initialised (`tcl-master init`) and is this its client port?") from None
    for der in chain:
        if fingerprint_der(der) == pin:
            ca_pem = der_to_pem(der)
            if signed_by(der_to_pem(chain[0]), ca_pem):
                return ca_pem
    raise PinMismatch(f"the master at {address} does not present the CA {pin}; refusing to connect")
