"""Certificates for a TLS etcd on 127.0.0.1 in tests: a throwaway CA, the member's
serving certificate (SAN 127.0.0.1 and localhost) and a client certificate for the
master (CN tcl-master), written as PEM files with the key files 0600."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class EtcdCerts:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path          # a CA that signed nothing here: the wrong one to trust

    def query(self, client: bool = True, ca: Path | None = None) -> str:
        query = f"?cacert={ca or self.ca}"
        return query + (f"&cert={self.client_cert}&key={self.client_key}" if client else "")


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca() -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name("test etcd CA")).issuer_name(_name("test etcd CA"))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _leaf(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, cn: str,
          server: bool) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server \
        else [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)
    return path


def make_etcd_certs(directory: Path) -> EtcdCerts:
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca()
    other, _ = _ca()
    server, server_key = _leaf(ca, ca_key, "etcd", server=True)
    client, client_key = _leaf(ca, ca_key, "tcl-master", server=False)
    pem = serialization.Encoding.PEM
    key_bytes = lambda k: k.private_bytes(pem, serialization.PrivateFormat.PKCS8,  # noqa: E731
                                          serialization.NoEncryption())
    return EtcdCerts(
        ca=_write(directory / "ca.pem", ca.public_bytes(pem)),
        server_cert=_write(directory / "server.pem", server.public_bytes(pem)),
        server_key=_write(directory / "server-key.pem", key_bytes(server_key), private=True),
        client_cert=_write(directory / "client.pem", client.public_bytes(pem)),
        client_key=_write(directory / "client-key.pem", key_bytes(client_key), private=True),
        other_ca=_write(directory / "other-ca.pem", other.public_bytes(pem)),
    )
