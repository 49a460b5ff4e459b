"""The master's identity records behind one interface: users, join tokens, node certificates.

Two implementations: `SqliteAuthStore` (master/identity/sqlite.py, DATA_DIR/auth.db, the
single-master default) and `EtcdAuthStore` (master/identity/etcd.py, keys under P/auth/ for
highly available masters). master/identity/users.py and master/identity/nodeauth.py hold the rules (who may
join, which token names which user); a store only keeps the records and makes each
multi-step change one transaction. `open_auth_store` (master/identity/choice.py) picks one.

The pure parts every store shares live here too: the records, the join-token check, and
the constant-time lookup of a user by token digest."""

from __future__ import annotations

import datetime as dt
import hmac
import secrets
from dataclasses import dataclass
from typing import Iterable, Protocol

from tcluster.domain.errors import FailedPrecondition, InvalidArgument, Unauthenticated
from tcluster.security.authz import Caller
from tcluster.security.jointoken import JoinTokenText
from tcluster.security.tokens import hash_secret

MAX_TOKEN_TTL_S = 7 * 86400.0


@dataclass(frozen=True)
class User:
    name: str
    unix_user: str
    grants: tuple[str, ...]
    admin: bool
    created_at: float

    def caller(self) -> Caller:
        return Caller(self.name, self.admin, self.unix_user, self.grants)


@dataclass(frozen=True)
class TokenRow:
    token_id: str
    secret_hash: str
    expires_at: float
    labels: dict[str, str]
    used_at: float | None
    used_by: str | None


@dataclass(frozen=True)
class NewJoinToken:
    """A token about to be stored: its row (hash only) and the secret shown once."""

    row: TokenRow
    created_at: float
    secret: str


class AuthStore(Protocol):
    """What users.py and nodeauth.py need. Every method is sync: the master calls them from
    its gRPC servicers, the offline commands from plain functions."""

    # ---- users ----
    def add_user(self, user: User, token_digest: str) -> None:
        """InvalidArgument('name') if the name exists."""
    def list_users(self) -> list[User]: ...
    def user_named(self, name: str) -> User | None:
        """One user by name: one row or key, not the list."""
    def remove_user(self, name: str) -> bool: ...
    def user_by_digest(self, digest: str) -> User | None:
        """The user whose token hashes to `digest`, compared in constant time with each."""

    # ---- join tokens ----
    def create_token(self, ttl_s: float, labels: dict[str, str], now: float) -> tuple[str, str]:
        """A new token's (id, secret); only the secret's hash is kept."""
    def token(self, token_id: str) -> TokenRow | None: ...
    def consume(self, token: JoinTokenText, node: str, now: float) -> dict[str, str]:
        """Checks the token and marks it used by `node`, atomically; returns its labels."""

    # ---- node certificates ----
    def check_name_free(self, node: str) -> None:
        """FailedPrecondition if `node` holds a live certificate."""
    def admit(self, token: JoinTokenText, node: str, serial: str, now: float) -> dict[str, str]:
        """One transaction: the name is free, the token is spent, the certificate recorded."""
    def record_cert(self, serial: str, node: str, token_id: str, labels: dict[str, str], now: float) -> None: ...
    def cert_status(self, serial: str) -> tuple[str, dict[str, str]] | None:
        """(node, labels) of a live certificate; None if unknown here or revoked."""
    def revoke_node(self, node: str, now: float) -> int:
        """Revokes every live certificate of `node`; returns how many there were."""
    def revoked_serials(self) -> set[str]: ...

    def close(self) -> None:
        """Idempotent: the user gate and the node guard may share one store."""


def check_token(row: TokenRow | None, secret: str, now: float) -> None:
    """Pure: may this secret join now? Unauthenticated says why not, without the secret."""
    if row is None:
        raise Unauthenticated("unknown join token; create one with `tcl-master join-token create`")
    if not hmac.compare_digest(row.secret_hash, hash_secret(secret)):
        raise Unauthenticated(f"join token {row.token_id}: wrong secret")
    if row.used_at is not None:
        raise Unauthenticated(f"join token {row.token_id} was already used (by node {row.used_by}); "
                              "tokens are single-use: create a new one")
    if now >= row.expires_at:
        when = dt.datetime.fromtimestamp(row.expires_at, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        raise Unauthenticated(f"join token {row.token_id} expired at {when}; create a new one")


def new_join_token(ttl_s: float, labels: dict[str, str], now: float) -> NewJoinToken:
    if not 0 < ttl_s <= MAX_TOKEN_TTL_S:
        raise InvalidArgument("--ttl", f"must be more than 0 and at most {MAX_TOKEN_TTL_S / 86400:.0f} days")
    token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    return NewJoinToken(TokenRow(token_id, hash_secret(secret), now + ttl_s, dict(labels), None, None), now, secret)


def name_taken(node: str, serial: str) -> FailedPrecondition:
    return FailedPrecondition(f"node {node} already holds a certificate (serial {serial}); to join again "
                              f"under this name, first run `tcl-master node revoke {node}`")


def raced(token_id: str) -> Unauthenticated:
    """The token was spent between our check and our write: another join won."""
    return Unauthenticated(f"join token {token_id} was already used; create a new one")


def user_exists(name: str) -> InvalidArgument:
    return InvalidArgument("name", f"user {name} exists; remove it first to issue a new token")


def match_digest(rows: Iterable[tuple[str, User]], digest: str) -> User | None:
    """Every row compared, in constant time each, so timing tells nothing about which matched."""
    wanted = digest.encode()
    found = None
    for stored, user in rows:
        if hmac.compare_digest(wanted, stored.encode()):
            found = user
    return found
