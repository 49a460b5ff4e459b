"""What a node reads and makes without `cryptography` (tcluster/security/certs.py, nodekeys.py),
checked against `cryptography` itself, which the master and these tests have."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest
from hypothesis import given, settings, strategies as st
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tcluster.domain.errors import InvalidArgument
from tcluster.security import certs, nodekeys, pki

THEN = dt.datetime(2001, 1, 1, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def master() -> pki.MasterPki:
    return pki.new_master_pki(["127.0.0.1"], "test")


def _self_signed(*attributes: x509.NameAttribute) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(list(attributes))
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(x509.Name([]))
            .public_key(key.public_key()).serial_number(7).not_valid_before(THEN)
            .not_valid_after(THEN + dt.timedelta(days=1)).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


def _oracle(cert_pem: bytes) -> str | None:
    """pki's node_of_cert before certs.py, with cryptography's parser."""
    cns = [a.value for a in x509.load_pem_x509_certificate(cert_pem).subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if len(cns) != 1 or not isinstance(cns[0], str) or not cns[0].startswith("node:"):
        return None
    return cns[0][len("node:"):]


CN, ORG = NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME


@pytest.mark.parametrize("attributes", [
    (x509.NameAttribute(CN, "node:n1"),),
    (x509.NameAttribute(ORG, "acme"), x509.NameAttribute(CN, "node:rack-1.b_2")),
    (x509.NameAttribute(CN, "node:n1", x509.name._ASN1Type.PrintableString),),  # type: ignore[attr-defined]
    (x509.NameAttribute(CN, "node:n1"), x509.NameAttribute(CN, "node:n2")),       # two: no node
    (x509.NameAttribute(CN, "gm:0"),),
    (x509.NameAttribute(ORG, "node:n1"),),                                          # not a CN
    (),
    (x509.NameAttribute(CN, "node:ünï"),),
])
def test_the_node_named_is_what_cryptography_reads(attributes: tuple[x509.NameAttribute, ...]) -> None:
    pem = _self_signed(*attributes)
    assert certs.node_of_cert(pem) == _oracle(pem)


def test_the_issued_certificates_read_the_same(master: pki.MasterPki) -> None:
    _, csr = nodekeys.make_node_csr("n1")
    node = pki.issue_node_cert(master, csr, "n1")
    for pem in (node, master.cert_chain_pem, master.ca_pem):
        assert certs.node_of_cert(pem) == _oracle(pem)
    assert certs.node_of_cert(node) == "n1"


@pytest.mark.parametrize("garbage", [b"", b"not pem", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                                     b"-----BEGIN CERTIFICATE-----\nMIIBkTCB+wIJ\n-----END CERTIFICATE-----\n"])
def test_garbage_names_no_node(garbage: bytes) -> None:
    assert certs.node_of_cert(garbage) is None


def test_fingerprints_pem_and_der_round_trip(master: pki.MasterPki) -> None:
    der = x509.load_pem_x509_certificate(master.ca_pem).public_bytes(serialization.Encoding.DER)
    assert certs.ca_fingerprint(master.ca_pem) == "sha256:" + hashlib.sha256(der).hexdigest()
    assert certs.der_to_pem(der) == master.ca_pem
    chain = certs.pem_blocks(master.cert_chain_pem + master.key_pem)      # the key's block is not a certificate
    assert len(chain) == 2 and certs.der_to_pem(chain[1]) == master.ca_pem


def test_a_node_key_and_csr_the_master_accepts(master: pki.MasterPki) -> None:
    key_pem, csr_pem = nodekeys.make_node_csr("rack-1.n_2")
    key = serialization.load_pem_private_key(key_pem, None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    assert key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")                           # PKCS#8, unencrypted
    csr = pki.load_csr(csr_pem, "rack-1.n_2")                  # the master's checks: name and signature
    assert csr.public_key().public_numbers() == key.public_key().public_numbers()
    assert nodekeys.make_node_csr("rack-1.n_2")[0] != key_pem                           # a fresh key each time


@pytest.mark.parametrize("name", ["bad name", "-lead", "a/b", "x" * 60, "n1\nCN = evil"])
def test_a_bad_node_name_never_reaches_openssl(name: str) -> None:
    with pytest.raises(InvalidArgument, match="not a node name"):
        nodekeys.make_node_csr(name)


def test_no_openssl_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodekeys.shutil, "which", lambda name, path=None: None)
    with pytest.raises(nodekeys.OpensslMissing, match="apt install openssl"):
        nodekeys.make_node_csr("n1")


def test_signed_by_checks_the_signature_only(master: pki.MasterPki) -> None:
    _, csr = nodekeys.make_node_csr("n1")
    assert nodekeys.signed_by(pki.issue_node_cert(master, csr, "n1"), master.ca_pem)
    other = pki.new_master_pki(["127.0.0.1"], "other")
    assert not nodekeys.signed_by(pki.issue_node_cert(master, csr, "n1"), other.ca_pem)
    old = pki.new_master_pki(["127.0.0.1"], "old", now=THEN)               # expired long ago: still its signature
    assert nodekeys.signed_by(pki.issue_node_cert(old, csr, "n1", now=THEN), old.ca_pem)
    assert not nodekeys.signed_by(b"garbage", master.ca_pem)
    assert not nodekeys.signed_by(master.ca_pem, b"garbage")


@settings(max_examples=300, deadline=None)
@given(cut=st.integers(0, 2000), flip=st.integers(0, 2000), bit=st.integers(0, 7))
def test_a_damaged_certificate_never_raises_and_reads_as_cryptography_reads_it(cut: int, flip: int, bit: int) -> None:
    der = bytearray(certs.first_der(_NODE_PEM))
    if flip < len(der):
        der[flip] ^= 1 << bit
    pem = certs.der_to_pem(bytes(der[:cut]))
    name = certs.node_of_cert(pem)
    try:
        expected = _oracle(pem)
    except (ValueError, x509.InvalidVersion):   # a flipped version byte: not a ValueError
        return          # cryptography refuses it; ours may too, or read the bytes it can
    assert name == expected


@pytest.mark.parametrize("byte", [0x04, 0x1F])
def test_a_name_whose_rdn_is_not_a_set_is_no_name(byte: int) -> None:
    """The RDN holding the CN re-tagged (a SET made an OCTET STRING, or a high tag number):
    cryptography refuses the certificate; so do we."""
    der = bytearray(certs.first_der(_NODE_PEM))
    at = bytes(der).index(b"\x55\x04\x03") - 6          # SET, len, SEQUENCE, len, OID tag, len: the SET
    assert der[at] == 0x31
    der[at] = byte
    pem = certs.der_to_pem(bytes(der))
    assert certs.node_of_cert(pem) is None
    with pytest.raises(ValueError):
        _oracle(pem)


_NODE_PEM = _self_signed(x509.NameAttribute(ORG, "acme"), x509.NameAttribute(CN, "node:n1"))
