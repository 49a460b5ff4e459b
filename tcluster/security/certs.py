"""What a node and `tcl` need of the cluster's certificates, with the standard library only.

The node package carries no `cryptography` (11.6 MB of every node's 52, with cffi and
pycparser: docs/install.md): the master signs, nodes only read. Here: PEM and DER, the
sha256 fingerprints join tokens pin, the node name in a certificate's CN, and files only
their owner reads. Making a key and a CSR, and checking a signature, are the `openssl`
command's (tcluster/security/nodekeys.py). The master's PKI (pki.py) uses these same
functions, so a name or a fingerprint reads the same on both sides."""

from __future__ import annotations

import base64
import hashlib
import os
import re
from pathlib import Path
from typing import Iterator

from tcluster.domain.errors import InvalidArgument

MASTER_ROLE_NAME = "master.tcluster"   # clients set ssl_target_name_override to this
NODE_CN_PREFIX = "node:"
# A certificate's CN holds at most 64 characters: `node:` plus the name.
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,58}$")
FINGERPRINT_PREFIX = "sha256:"
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\s+([A-Za-z0-9+/=\s]+?)-----END \1-----")
_CN_OID = b"\x55\x04\x03"                 # 2.5.4.3, commonName
_SEQUENCE, _SET, _OID = 0x30, 0x31, 0x06
_STRINGS = {0x0C: "utf-8", 0x13: "ascii", 0x16: "ascii"}   # UTF8String, PrintableString, IA5String


def check_node_name(name: str, field_name: str = "node") -> str:
    if not NODE_NAME.match(name):
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise InvalidArgument(field_name, f"{shown!r} is not a node name that can join; use 1-59 of "
                                          "A-Z a-z 0-9 _ . - starting with a letter or digit")
    return name


# --- PEM and DER ---------------------------------------------------------------------------

def pem_blocks(pem: bytes, label: str = "CERTIFICATE") -> list[bytes]:
    """The DER of each `label` block, in order."""
    return [base64.b64decode(b"".join(body.split()), validate=True)
            for kind, body in _PEM_BLOCK.findall(pem) if kind == label.encode()]


def first_der(pem: bytes) -> bytes:
    blocks = pem_blocks(pem)
    if not blocks:
        raise ValueError("no PEM certificate found")
    return blocks[0]


def der_to_pem(der: bytes, label: str = "CERTIFICATE") -> bytes:
    body = base64.b64encode(der)
    lines = b"\n".join(body[i:i + 64] for i in range(0, len(body), 64))
    return b"-----BEGIN %s-----\n%s\n-----END %s-----\n" % (label.encode(), lines, label.encode())


def fingerprint_der(der: bytes) -> str:
    return FINGERPRINT_PREFIX + hashlib.sha256(der).hexdigest()


def ca_fingerprint(ca_pem: bytes) -> str:
    """`sha256:<hex>` of the (first) certificate's DER: what join tokens pin. ValueError if
    it is not a certificate."""
    der = first_der(ca_pem)
    subject_common_names(der)            # walks it: a certificate's structure, or ValueError
    return fingerprint_der(der)


def _element(der: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(tag, start, end) of the value of the DER element at `pos`, within `end`."""
    if pos + 2 > end:
        raise ValueError("truncated DER")
    tag, length, pos = der[pos], der[pos + 1], pos + 2
    if tag & 0x1F == 0x1F:
        raise ValueError("high-tag-number forms are not in a certificate")
    if length & 0x80:
        size = length & 0x7F
        if not 0 < size <= 4 or pos + size > end or der[pos] == 0:
            raise ValueError("bad DER length")
        length, pos = int.from_bytes(der[pos:pos + size], "big"), pos + size
        if length < 0x80:
            raise ValueError("bad DER length (not minimal)")
    if pos + length > end:
        raise ValueError("truncated DER")
    return tag, pos, pos + length


def _children(der: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    pos = start
    while pos < end:
        tag, value, pos = _element(der, pos, end)
        yield tag, value, pos


def subject_common_names(der: bytes) -> list[str | None]:
    """Every CN in the certificate's subject, in order (None for one not held as a string)."""
    tag, start, end = _element(der, 0, len(der))               # Certificate
    if end != len(der):
        raise ValueError("bytes after the certificate")
    tbs = list(_children(der, start, end))[:1] if tag == _SEQUENCE else []
    if not tbs or tbs[0][0] != _SEQUENCE:
        raise ValueError("not an X.509 certificate")
    fields = list(_children(der, tbs[0][1], tbs[0][2]))        # tbsCertificate
    if fields and fields[0][0] == 0xA0:                        # [0] version
        fields = fields[1:]
    if len(fields) < 5 or fields[4][0] != _SEQUENCE:
        raise ValueError("not an X.509 certificate")
    _, start, end = fields[4]                                  # serial, signature, issuer, validity, subject
    names: list[str | None] = []
    for rdn_tag, rdn_start, rdn_end in _children(der, start, end):   # each RDN: a SET of attributes
        if rdn_tag != _SET:
            raise ValueError("not an X.509 name")
        for at_tag, at_start, at_end in _children(der, rdn_start, rdn_end):
            parts = list(_children(der, at_start, at_end))
            if at_tag != _SEQUENCE or len(parts) != 2 or parts[0][0] != _OID:
                raise ValueError("not an X.509 name")
            (_, oid_start, oid_end), (tag, value_start, value_end) = parts
            if der[oid_start:oid_end] == _CN_OID:
                encoding = _STRINGS.get(tag)
                names.append(der[value_start:value_end].decode(encoding, "replace") if encoding else None)
    return names


def node_of_cert(cert_pem: bytes) -> str | None:
    """The node a certificate names (`node:<name>` CN), or None for any other certificate."""
    try:
        cns = subject_common_names(first_der(cert_pem))
    except ValueError:          # binascii.Error is one
        return None
    if len(cns) != 1 or cns[0] is None or not cns[0].startswith(NODE_CN_PREFIX):
        return None
    return cns[0][len(NODE_CN_PREFIX):]


# --- files -------------------------------------------------------------------------------

def write_private(path: Path, data: bytes) -> None:
    """Creates a file readable by its owner only (0600), atomically; never widens an existing one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def make_private_dir(path: Path) -> Path:
    """A directory only its owner can enter (0700), also when it existed with wider modes."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path
