"""The cluster's PKI: one CA, a master certificate, node certificates (ECDSA P-256).

Roles are told apart by names, as Nomad's `server.<region>.nomad` rule does: only the
master's certificate carries the DNS name `master.tcluster` (and serverAuth), and our
clients verify that name whatever address they dial. A node certificate has CN
`node:<name>` and clientAuth only, so it can never pass as the master.

State lives under DATA_DIR/pki/ (0700): ca.crt, ca.key, master.crt (leaf + CA), master.key
(keys 0600), or under the same names in etcd (master/identity/choice.py). Nothing here logs, and
keys never appear in a repr."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tcluster.domain.errors import FailedPrecondition, InvalidArgument
# What nodes share with the master, in the standard library: certs.py.
from tcluster.security.certs import (MASTER_ROLE_NAME, NODE_CN_PREFIX, ca_fingerprint, check_node_name, fingerprint_der,
                                     make_private_dir, write_private)

PKI_DIR = "pki"
PKI_FILES = ("ca.crt", "ca.key", "master.crt", "master.key")
CA_VALIDITY = dt.timedelta(days=20 * 365)
LEAF_VALIDITY = dt.timedelta(days=10 * 365)   # no rotation yet: long-lived, revocable by name
CLOCK_SKEW = dt.timedelta(minutes=5)           # a node whose clock lags a little still accepts
_DNS_NAME = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")


@dataclass(frozen=True)
class MasterPki:
    """What the master serves with, and what it signs node certificates with."""

    origin: str                                      # where it was loaded from, for messages
    ca_pem: bytes
    cert_chain_pem: bytes                            # master leaf + CA
    key_pem: bytes = field(repr=False)
    ca_key_pem: bytes = field(repr=False)

    @property
    def fingerprint(self) -> str:
        return ca_fingerprint(self.ca_pem)


def cert_fingerprint(cert: x509.Certificate) -> str:
    return fingerprint_der(cert.public_bytes(serialization.Encoding.DER))


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_to_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def cert_to_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def as_of(now: dt.datetime | None) -> dt.datetime:
    """`now`, or the current UTC time when None (tests pass a fixed clock)."""
    return now if now is not None else dt.datetime.now(dt.timezone.utc)


def cert_builder(subject: x509.Name, issuer: x509.Name, public_key: object, now: dt.datetime,
                 validity: dt.timedelta) -> x509.CertificateBuilder:
    """A certificate's common part: names, key, serial, validity from `now`, its key id."""
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())   # type: ignore[arg-type]
            .not_valid_before(now - CLOCK_SKEW).not_valid_after(now + validity)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False))  # type: ignore[arg-type]


def leaf_extensions(builder: x509.CertificateBuilder, ca_cert: x509.Certificate,
                    usage: x509.ObjectIdentifier) -> x509.CertificateBuilder:
    """What a leaf (node, master or GM) certificate adds: not a CA, its usage, the CA's key id."""
    ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return (builder
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False))


def make_ca(now: dt.datetime | None = None) -> tuple[bytes, bytes]:
    """A new self-signed CA: (ca_pem, ca_key_pem)."""
    now = as_of(now)
    key = new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tcluster CA"),
                      x509.NameAttribute(NameOID.SERIAL_NUMBER, os.urandom(8).hex())])
    cert = (cert_builder(name, name, key.public_key(), now, CA_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert_to_pem(cert), key_to_pem(key)


def master_sans(advertise: list[str]) -> list[x509.GeneralName]:
    """The role name first, then loopback, then every advertised name or IP (in order, once)."""
    names: list[x509.GeneralName] = [x509.DNSName(MASTER_ROLE_NAME), x509.DNSName("localhost"),
                                     x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                     x509.IPAddress(ipaddress.ip_address("::1"))]
    for item in (a.strip() for a in advertise):
        if not item:
            continue
        try:
            general: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(item.strip("[]")))
        except ValueError:
            if not _DNS_NAME.match(item):
                shown = item if len(item) <= 40 else item[:40] + "..."
                raise InvalidArgument("--advertise", f"{shown!r} is neither an IP address nor a DNS name") from None
            general = x509.DNSName(item.lower())
        if general not in names:
            names.append(general)
    return names


def make_master_cert(ca_pem: bytes, ca_key_pem: bytes, advertise: list[str],
                     now: dt.datetime | None = None) -> tuple[bytes, bytes]:
    """The master's serving certificate: (chain_pem = leaf + CA, key_pem)."""
    ca_cert, ca_key = load_ca(ca_pem, ca_key_pem)
    key = new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, MASTER_ROLE_NAME)])
    cert = (leaf_extensions(cert_builder(subject, ca_cert.subject, key.public_key(), as_of(now), LEAF_VALIDITY),
                             ca_cert, ExtendedKeyUsageOID.SERVER_AUTH)
            .add_extension(x509.SubjectAlternativeName(master_sans(advertise)), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert_to_pem(cert) + ca_pem, key_to_pem(key)


def load_ca(ca_pem: bytes, ca_key_pem: bytes) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The cluster CA's certificate and key from their PEM forms."""
    key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise FailedPrecondition("the CA key is not an EC key")
    return x509.load_pem_x509_certificate(ca_pem), key


def load_csr(csr_pem: bytes, node: str) -> x509.CertificateSigningRequest:
    """The CSR, checked: parses, self-signed by its key, a P-256 key, CN `node:<node>`."""
    check_node_name(node)
    try:
        csr = x509.load_pem_x509_csr(csr_pem)
    except ValueError:
        raise InvalidArgument("csr_pem", "not a PEM certificate signing request") from None
    if not csr.is_signature_valid:
        raise InvalidArgument("csr_pem", "the request's signature does not match its key")
    public = csr.public_key()
    if not isinstance(public, ec.EllipticCurvePublicKey) or public.curve.name != "secp256r1":
        raise InvalidArgument("csr_pem", "the key must be ECDSA P-256")
    cns = [a.value for a in csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if cns != [NODE_CN_PREFIX + node]:
        shown = str(cns[0])[:40] if cns else "none"
        raise InvalidArgument("csr_pem", f"the request's common name is {shown!r}; it must be "
                                         f"{NODE_CN_PREFIX + node!r} (the node that joins)")
    return csr


def issue_node_cert(pki: MasterPki, csr_pem: bytes, node: str, now: dt.datetime | None = None) -> bytes:
    """Signs a checked CSR as node `node`: CN node:<node>, clientAuth only, no SANs."""
    csr = load_csr(csr_pem, node)
    ca_cert, ca_key = load_ca(pki.ca_pem, pki.ca_key_pem)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NODE_CN_PREFIX + node)])
    cert = (leaf_extensions(cert_builder(subject, ca_cert.subject, csr.public_key(), as_of(now), LEAF_VALIDITY),
                             ca_cert, ExtendedKeyUsageOID.CLIENT_AUTH)
            .sign(ca_key, hashes.SHA256()))
    return cert_to_pem(cert)


def serial_of_cert(cert_pem: bytes) -> str:
    return format(x509.load_pem_x509_certificate(cert_pem).serial_number, "x")


def issued_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    """True if the CA signed this certificate (signature only; dates and names are TLS's job)."""
    cert, ca = x509.load_pem_x509_certificate(cert_pem), x509.load_pem_x509_certificate(ca_pem)
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def new_master_pki(advertise: list[str], origin: str, now: dt.datetime | None = None) -> MasterPki:
    """A new CA and master certificate, in memory only (the caller stores them)."""
    ca_pem, ca_key_pem = make_ca(now)
    chain_pem, key_pem = make_master_cert(ca_pem, ca_key_pem, advertise, now)
    return MasterPki(origin, ca_pem, chain_pem, key_pem, ca_key_pem)


def pki_files(pki: MasterPki) -> dict[str, bytes]:
    """The four files (or etcd keys) by name; keys first, as they are written."""
    return {"ca.key": pki.ca_key_pem, "master.key": pki.key_pem, "ca.crt": pki.ca_pem,
            "master.crt": pki.cert_chain_pem}


def pki_from_files(origin: str, files: Mapping[str, bytes]) -> MasterPki:
    """The inverse of pki_files; FailedPrecondition naming what is missing."""
    missing = [name for name in PKI_FILES if name not in files]
    if missing:
        raise FailedPrecondition(f"{origin} is incomplete (no {', '.join(missing)}); restore it, or remove it "
                                 "and run `tcl-master init` again")
    return MasterPki(origin, files["ca.crt"], files["master.crt"], files["master.key"], files["ca.key"])


def init_pki(data_dir: Path, advertise: list[str], now: dt.datetime | None = None) -> MasterPki:
    """Creates DATA_DIR/pki with a new CA and master certificate; refuses to overwrite one."""
    final = data_dir / PKI_DIR
    if final.exists():
        raise FailedPrecondition(f"{final} already exists: this master is initialised (CA "
                                 f"{_existing_fingerprint(final)}); remove the directory to start a new cluster")
    pki = new_master_pki(advertise, str(final), now)
    make_private_dir(data_dir)
    staging = make_private_dir(data_dir / (PKI_DIR + ".new"))
    try:
        for name, data in pki_files(pki).items():
            write_private(staging / name, data)
        os.rename(staging, final)   # all or nothing: a crash leaves no half-made pki/
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return pki


def _existing_fingerprint(directory: Path) -> str:
    try:
        return ca_fingerprint((directory / "ca.crt").read_bytes())
    except (OSError, ValueError):
        return "unreadable"


def load_master_pki(data_dir: Path) -> MasterPki | None:
    """The master's PKI if `init` made one, else None (an insecure master)."""
    directory = data_dir / PKI_DIR
    if not directory.exists():
        return None
    try:
        return pki_from_files(str(directory), {name: (directory / name).read_bytes() for name in PKI_FILES})
    except OSError as error:
        raise FailedPrecondition(f"{directory} is incomplete ({error.strerror}: {error.filename}); "
                                 "restore it, or remove it and run `tcl-master init` again") from None
