"""Node identities in DATA_DIR/auth.db: join tokens, and the certificates issued to nodes
(so that `tcl-master node revoke NAME` can stop them).

Join tokens (tcluster/security/jointoken.py): only the secret's sha256 is stored, compared
in constant time, and never logged.

auth.db is shared with the user side (master/users.py): each module creates its own tables.
The offline commands write it directly (WAL); the running master reads it on every check,
so a revocation counts from the next connect."""

from __future__ import annotations

import datetime as dt
import hmac
import json
import secrets
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from tcluster.errors import FailedPrecondition, InvalidArgument, Unauthenticated
from tcluster.security.jointoken import JoinTokenText
from tcluster.security.tokens import hash_secret

AUTH_DB = "auth.db"
MAX_TOKEN_TTL_S = 7 * 86400.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS join_tokens (
    id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, created_at REAL NOT NULL, expires_at REAL NOT NULL,
    labels TEXT NOT NULL, used_at REAL, used_by TEXT);
CREATE TABLE IF NOT EXISTS node_certs (
    serial TEXT PRIMARY KEY, node TEXT NOT NULL, issued_at REAL NOT NULL, token_id TEXT NOT NULL,
    labels TEXT NOT NULL, revoked_at REAL);
CREATE INDEX IF NOT EXISTS node_certs_by_node ON node_certs (node);
"""


@dataclass(frozen=True)
class TokenRow:
    token_id: str
    secret_hash: str
    expires_at: float
    labels: dict[str, str]
    used_at: float | None
    used_by: str | None


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


def connect_auth_db(data_dir: Path) -> sqlite3.Connection:
    """auth.db (0600) with this module's tables; WAL so offline commands and the master share it."""
    path = data_dir / AUTH_DB
    if not path.exists():
        path.touch(mode=0o600)
    db = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.executescript(_SCHEMA)
    return db


class NodeAuth:
    """Join tokens and issued node certificates, over one auth.db connection."""

    def __init__(self, data_dir: Path) -> None:
        self.db = connect_auth_db(data_dir)

    def close(self) -> None:
        self.db.close()

    def create_token(self, ttl_s: float, labels: dict[str, str], now: float) -> tuple[str, str]:
        """A new token's (id, secret); only the secret's hash is kept."""
        if not 0 < ttl_s <= MAX_TOKEN_TTL_S:
            raise InvalidArgument("--ttl", f"must be more than 0 and at most {MAX_TOKEN_TTL_S / 86400:.0f} days")
        token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        self.db.execute("INSERT INTO join_tokens (id, secret_hash, created_at, expires_at, labels) VALUES (?,?,?,?,?)",
                        (token_id, hash_secret(secret), now, now + ttl_s, json.dumps(labels, sort_keys=True)))
        return token_id, secret

    def token(self, token_id: str) -> TokenRow | None:
        row = self.db.execute("SELECT id, secret_hash, expires_at, labels, used_at, used_by FROM join_tokens "
                              "WHERE id = ?", (token_id,)).fetchone()
        if row is None:
            return None
        return TokenRow(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5])

    def consume(self, token: JoinTokenText, node: str, now: float) -> dict[str, str]:
        """Checks the token and marks it used by `node`, atomically; returns its labels."""
        row = self.token(token.token_id)
        check_token(row, token.secret, now)
        assert row is not None
        used = self.db.execute("UPDATE join_tokens SET used_at = ?, used_by = ? WHERE id = ? AND used_at IS NULL",
                               (now, node, token.token_id))
        if used.rowcount != 1:   # another join won the race for this token
            raise Unauthenticated(f"join token {token.token_id} was already used; create a new one")
        return row.labels

    def check_name_free(self, node: str) -> None:
        """One node, one live certificate: a second machine cannot take over a joined name."""
        row = self.db.execute("SELECT serial FROM node_certs WHERE node = ? AND revoked_at IS NULL LIMIT 1",
                              (node,)).fetchone()
        if row is not None:
            raise FailedPrecondition(f"node {node} already holds a certificate (serial {row[0]}); to join again "
                                     f"under this name, first run `tcl-master node revoke {node}`")

    def admit(self, token: JoinTokenText, node: str, serial: str, now: float) -> dict[str, str]:
        """One transaction: the name is free, the token is spent, the certificate recorded.
        A crash (or a failed write) in between leaves the token unspent and no certificate
        on record, so the same token can join again."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.check_name_free(node)
            labels = self.consume(token, node, now)
            self.record_cert(serial, node, token.token_id, labels, now)
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
        return labels

    def record_cert(self, serial: str, node: str, token_id: str, labels: dict[str, str], now: float) -> None:
        self.db.execute("INSERT INTO node_certs (serial, node, issued_at, token_id, labels) VALUES (?,?,?,?,?)",
                        (serial, node, now, token_id, json.dumps(labels, sort_keys=True)))

    def cert_status(self, serial: str) -> tuple[str, dict[str, str]] | None:
        """(node, labels) of a live certificate; None if unknown here or revoked."""
        row = self.db.execute("SELECT node, labels, revoked_at FROM node_certs WHERE serial = ?", (serial,)).fetchone()
        if row is None or row[2] is not None:
            return None
        return row[0], json.loads(row[1])

    def revoke_node(self, node: str, now: float) -> int:
        """Revokes every certificate issued to `node` so far; returns how many were live."""
        return self.db.execute("UPDATE node_certs SET revoked_at = ? WHERE node = ? AND revoked_at IS NULL",
                               (now, node)).rowcount

    def revoked_serials(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT serial FROM node_certs WHERE revoked_at IS NOT NULL")}
