"""The cluster PKI: issuance, roles (EKU, SANs, CN), fingerprints, files, and a TLS
handshake in memory showing a node certificate cannot pass as the master."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tcluster.domain.errors import FailedPrecondition, InvalidArgument
from tcluster.security import certs, nodekeys, pki
from tcluster.security.bootstrap import normalize_fingerprint

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> pki.MasterPki:
    return pki.init_pki(tmp_path_factory.mktemp("m"), ["10.0.0.5", "Master.Example.org"], now=NOW)


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def _eku(cert: x509.Certificate) -> list[x509.ObjectIdentifier]:
    return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_master_cert_has_the_role_name_loopback_and_advertised_names(master: pki.MasterPki) -> None:
    leaf = _cert(master.cert_chain_pem)
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["master.tcluster", "localhost", "master.example.org"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address(a) for a in ("127.0.0.1", "::1", "10.0.0.5")]
    assert _eku(leaf) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert pki.issued_by(master.cert_chain_pem, master.ca_pem)
    assert master.cert_chain_pem.endswith(master.ca_pem)   # the chain carries the CA (pinning reads it)


def test_node_cert_is_client_only_named_by_cn_and_never_the_master(master: pki.MasterPki) -> None:
    key_pem, csr_pem = nodekeys.make_node_csr("n1")
    cert_pem = pki.issue_node_cert(master, csr_pem, "n1", now=NOW)
    cert = _cert(cert_pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "node:n1"
    assert _eku(cert) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    with pytest.raises(x509.ExtensionNotFound):
        cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert certs.node_of_cert(cert_pem) == "n1"
    assert certs.node_of_cert(master.cert_chain_pem) is None
    assert pki.issued_by(cert_pem, master.ca_pem)
    assert cert.not_valid_before_utc < NOW < cert.not_valid_after_utc
    assert b"PRIVATE KEY" in key_pem and b"PRIVATE" not in repr(master).encode()


@pytest.mark.parametrize("csr_node, asked, message", [
    ("n1", "n2", "must be 'node:n2'"),
    ("n1", "bad name!", "not a node name"),
    ("n1", "x" * 60, "not a node name"),
])
def test_issue_refuses_a_csr_for_another_name(master: pki.MasterPki, csr_node: str, asked: str, message: str) -> None:
    _, csr_pem = nodekeys.make_node_csr(csr_node)
    with pytest.raises(InvalidArgument, match=message):
        pki.issue_node_cert(master, csr_pem, asked)


def test_issue_refuses_garbage_and_non_p256(master: pki.MasterPki) -> None:
    with pytest.raises(InvalidArgument, match="not a PEM certificate signing request"):
        pki.issue_node_cert(master, b"hello", "n1")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP384R1())
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "node:n1")])).sign(key, hashes.SHA256()))
    with pytest.raises(InvalidArgument, match="P-256"):
        pki.issue_node_cert(master, csr.public_bytes(serialization.Encoding.PEM), "n1")


def test_fingerprint_is_sha256_of_the_der_and_normalizes(master: pki.MasterPki) -> None:
    import hashlib
    der = _cert(master.ca_pem).public_bytes(pki.serialization.Encoding.DER)
    assert master.fingerprint == "sha256:" + hashlib.sha256(der).hexdigest()
    assert normalize_fingerprint(master.fingerprint.removeprefix("sha256:").upper()) == master.fingerprint
    with pytest.raises(ValueError, match="64 hex"):
        normalize_fingerprint("sha256:abc")


def test_init_writes_private_files_and_refuses_to_overwrite(tmp_path: Path) -> None:
    made = pki.init_pki(tmp_path, [])
    directory = tmp_path / "pki"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for name in ("ca.key", "master.key", "ca.crt", "master.crt"):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600, name
    assert not (tmp_path / "pki.new").exists()
    loaded = pki.load_master_pki(tmp_path)
    assert loaded == made
    with pytest.raises(FailedPrecondition, match=f"already exists.*{made.fingerprint}"):
        pki.init_pki(tmp_path, [])
    assert pki.load_master_pki(tmp_path / "nothing") is None


def test_bad_advertise_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="--advertise.*neither an IP"):
        pki.init_pki(tmp_path, ["bad name"])
    assert not (tmp_path / "pki").exists()


def _handshake(server_chain: bytes, server_key: bytes, ca_pem: bytes, tmp: Path) -> None:
    """A TLS handshake in memory, as our clients make it: the CA as the only root, the role name."""
    (tmp / "chain.pem").write_bytes(server_chain)
    (tmp / "key.pem").write_bytes(server_key)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp / "chain.pem", tmp / "key.pem")
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(cadata=ca_pem.decode())
    bios = [ssl.MemoryBIO() for _ in range(4)]
    client = client_ctx.wrap_bio(bios[0], bios[1], server_hostname=certs.MASTER_ROLE_NAME)
    server = server_ctx.wrap_bio(bios[2], bios[3], server_side=True)
    done = {"c": False, "s": False}
    for _ in range(10):
        for side, obj in (("c", client), ("s", server)):
            if not done[side]:
                try:
                    obj.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        bios[2].write(bios[1].read())
        bios[0].write(bios[3].read())
        if all(done.values()):
            return
    raise AssertionError("the handshake did not finish")


def test_master_cert_passes_a_client_check(master: pki.MasterPki, tmp_path: Path) -> None:
    _handshake(master.cert_chain_pem, master.key_pem, master.ca_pem, tmp_path)


def test_node_cert_cannot_pass_as_the_master(master: pki.MasterPki, tmp_path: Path) -> None:
    key_pem, csr_pem = nodekeys.make_node_csr("n1")
    cert_pem = pki.issue_node_cert(master, csr_pem, "n1")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(cert_pem + master.ca_pem, key_pem, master.ca_pem, tmp_path)


def test_master_cert_of_another_cluster_is_refused(master: pki.MasterPki, tmp_path: Path) -> None:
    other = pki.init_pki(tmp_path / "other", [])
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(other.cert_chain_pem, other.key_pem, master.ca_pem, tmp_path)
