"""Global-manager identities from a cluster's CA: a client certificate with CN `gm:<name>`.

A GM certificate is recorded in the same certificate table as node certificates, under the
owner name `gm:<name>` (a node name cannot hold ':'), so revocation, the revoked-serial sweep
and both identity stores (SQLite, etcd) work for GMs unchanged. The CN prefixes keep the two
apart: the agent stream wants `node:<name>`, the LM service wants `gm:<name>`."""

from __future__ import annotations

import datetime as dt

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tcluster.domain.errors import InvalidArgument
from tcluster.security.certs import NODE_NAME
from tcluster.security.pki import (LEAF_VALIDITY, MasterPki, as_of, cert_builder, cert_to_pem, key_to_pem,
                                   leaf_extensions, load_ca, new_key)

GM_CN_PREFIX = "gm:"
GM_INDEX_LABEL = "gm-index"     # recorded with the certificate: the only GM index it may act as


def check_gm_name(name: str, field_name: str = "NAME") -> str:
    if not NODE_NAME.match(name):
        raise InvalidArgument(field_name, f"{name[:40]!r} is not a GM name; use 1-59 of A-Z a-z 0-9 _ . - "
                                          "starting with a letter or digit")
    return name


def gm_owner(name: str) -> str:
    """The owner name a GM's certificates are recorded (and revoked) under."""
    return GM_CN_PREFIX + name


def issue_gm_cert(pki: MasterPki, name: str, validity: dt.timedelta = LEAF_VALIDITY,
                  now: dt.datetime | None = None) -> tuple[bytes, bytes]:
    """A new key and its certificate: CN gm:<name>, clientAuth only. Returns (cert_pem, key_pem)."""
    check_gm_name(name)
    key = new_key()
    ca_cert, ca_key = load_ca(pki.ca_pem, pki.ca_key_pem)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, gm_owner(name))])
    cert = (leaf_extensions(cert_builder(subject, ca_cert.subject, key.public_key(), as_of(now), validity),
                             ca_cert, ExtendedKeyUsageOID.CLIENT_AUTH)
            .sign(ca_key, hashes.SHA256()))
    return cert_to_pem(cert), key_to_pem(key)


def gm_of_common_name(common_name: str) -> str | None:
    """The GM a verified certificate's CN names, or None when it is not a GM certificate."""
    if not common_name.startswith(GM_CN_PREFIX):
        return None
    name = common_name[len(GM_CN_PREFIX):]
    return name if NODE_NAME.match(name) else None
