"""User bearer tokens: `tcu.<ca sha256 hex>.<secret>`.

The secret is 32 random bytes (urlsafe base64). The middle part pins the cluster CA, as
kubeadm and k3s join tokens do, so `tcl login` can authenticate the master from the token
alone; it may be empty (a master without TLS material). Only sha256(secret) is stored,
and checks compare digests in constant time: the store never holds a usable token, and
the CA part is not secret, so it is not hashed (a token given with its CA part stripped
still works)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from tcluster.domain.errors import Unauthenticated
from tcluster.security.certs import FINGERPRINT_PREFIX

PREFIX = "tcu"
SECRET_BYTES = 32
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_SECRET = re.compile(r"^[A-Za-z0-9_-]{43}$")


@dataclass(frozen=True)
class UserToken:
    ca_fingerprint: str      # "sha256:<hex>", or "" when the token pins no CA
    secret: str


def new_token(ca_fingerprint: str = "") -> str:
    """A fresh token, pinning `ca_fingerprint` ("sha256:<hex>") if given."""
    pin = ca_fingerprint.removeprefix(FINGERPRINT_PREFIX).lower()
    if pin and not _HEX64.match(pin):
        raise ValueError(f"ca_fingerprint {ca_fingerprint[:80]!r} is not sha256:<64 hex digits>")
    return f"{PREFIX}.{pin}.{secrets.token_urlsafe(SECRET_BYTES)}"


def parse_token(token: str) -> UserToken:
    """Raises Unauthenticated (without echoing the token) when it is not of our form."""
    parts = token.strip().split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise Unauthenticated(f"the token is not a tcluster user token (expected {PREFIX}.<ca>.<secret>)")
    pin, secret = parts[1].lower(), parts[2]
    if pin and not _HEX64.match(pin):
        raise Unauthenticated("the token's CA part is not 64 hex digits")
    if not _SECRET.match(secret):
        raise Unauthenticated("the token's secret part is malformed (truncated when copied?)")
    return UserToken(FINGERPRINT_PREFIX + pin if pin else "", secret)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def token_hash(token: str) -> str:
    """What the store keeps for a token: sha256 of its secret, hex."""
    return hash_secret(parse_token(token).secret)


def matches(token: str, stored_hash: str) -> bool:
    """Constant time in the compared digests; False for a malformed token."""
    try:
        candidate = token_hash(token)
    except Unauthenticated:
        return False
    return hmac.compare_digest(candidate.encode(), stored_hash.encode())
