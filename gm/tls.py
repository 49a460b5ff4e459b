"""tcl-gm's TLS material: per-LM client identities (`--lm-tls lm0=DIR`, DIR holding ca.pem,
cert.pem, key.pem from `tcl-master gm issue`), and the GM's own server certificate.

Files are read and checked once at start, so a wrong path, a certificate from another CA or a
node's certificate is refused with the reason before anything is dialled; an LM not listed
is dialled in plaintext (an insecure, dev master)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID

from tcluster.security.channel import TLS_OPTIONS
from tcluster.gm.settings import GMSettings
from tcluster.security.gmcert import gm_of_common_name
from tcluster.security.pki import issued_by


class TLSError(ValueError):
    pass


@dataclass(frozen=True)
class ClientTLS:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self.ca_pem, private_key=self.key_pem,
                                            certificate_chain=self.cert_pem)


def _read(path: Path, field: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise TLSError(f"{field}: cannot read {path}: {e.strerror or e}") from e


def _cert(pem: bytes, path: Path, field: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as e:
        raise TLSError(f"{field}: {path} is not a PEM certificate") from e


def load_lm_dir(lm: str, directory: str, now: dt.datetime | None = None) -> ClientTLS:
    """DIR's ca.pem, cert.pem, key.pem, checked: a GM certificate (CN gm:NAME) signed by ca.pem, in date."""
    field, base = f"--lm-tls {lm}", Path(directory)
    ca, cert, key = (_read(base / f, field) for f in ("ca.pem", "cert.pem", "key.pem"))
    parsed = _cert(cert, base / "cert.pem", field)
    _cert(ca, base / "ca.pem", field)
    cns = [str(a.value) for a in parsed.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if len(cns) != 1 or gm_of_common_name(cns[0]) is None:
        shown = cns[0][:60] if cns else "none"
        raise TLSError(f"{field}: {base}/cert.pem has CN {shown!r}, not a GM certificate (gm:NAME); "
                       "make one with `tcl-master gm issue NAME --out DIR` on that LM's master")
    if not issued_by(cert, ca):
        raise TLSError(f"{field}: {base}/cert.pem was not issued by {base}/ca.pem (the LM cluster's CA)")
    now = now or dt.datetime.now(dt.timezone.utc)
    if parsed.not_valid_after_utc < now:
        raise TLSError(f"{field}: {base}/cert.pem expired at {parsed.not_valid_after_utc:%Y-%m-%d %H:%M} UTC; "
                       "issue a new one with `tcl-master gm issue`")
    return ClientTLS(ca, cert, key)


Dial = tuple[grpc.ChannelCredentials, list[tuple[str, str]]]    # credentials, channel options


def lm_credentials(lms: list[tuple[str, list[str]]], lm_tls: dict[str, str]) -> dict[str, Dial]:
    """Address -> how to dial it, for every address of every LM that has TLS material. Like an
    agent, the GM accepts only a certificate with the masters' role name, whatever address it
    dials (so every master of an HA LM passes, and nothing else from that CA does)."""
    names = {n for n, _ in lms}
    for lm in lm_tls:
        if lm not in names:
            raise TLSError(f"--lm-tls: {lm!r} is not an LM of --lms (known: {', '.join(sorted(names))})")
    out: dict[str, Dial] = {}
    for name, addresses in lms:
        if name in lm_tls:
            dial = (load_lm_dir(name, lm_tls[name]).credentials(), list(TLS_OPTIONS))
            out.update({a: dial for a in addresses})
    return out


def server_credentials(cert: str, key: str, client_ca: str) -> grpc.ServerCredentials:
    """The GM's own server: TLS, and mutual TLS when a client CA is given."""
    pair = (_read(Path(key), "--tls-key"), _read(Path(cert), "--tls-cert"))
    if not client_ca:
        return grpc.ssl_server_credentials([pair])
    return grpc.ssl_server_credentials([pair], root_certificates=_read(Path(client_ca), "--client-ca"),
                                       require_client_auth=True)


def peer_credentials(cert: str, key: str, client_ca: str) -> grpc.ChannelCredentials:
    """How this GM dials the other GMs (forwarding) when it serves TLS: their certificates come
    from the same CA as --client-ca, and it shows its own certificate as a client."""
    return grpc.ssl_channel_credentials(root_certificates=_read(Path(client_ca), "--client-ca") if client_ca else None,
                                        private_key=_read(Path(key), "--tls-key"),
                                        certificate_chain=_read(Path(cert), "--tls-cert"))


def gm_peer_credentials(s: GMSettings) -> dict[str, Dial]:
    """Address -> credentials for the other GMs, when this GM serves TLS (they are assumed to as well)."""
    if not s.tls_cert:
        return {}
    dial: Dial = (peer_credentials(s.tls_cert, s.tls_key, s.client_ca), [])
    return {addr: dial for name, addr in s.gms if name != s.name}
