"""The identity store of a single master: DATA_DIR/auth.db (SQLite).

The offline commands (`tcl-master user ...`, `join-token create`, `node revoke`) write the
file directly while the master runs, so it is opened in one way only, here: 0600 before
SQLite touches it (its journals take the same mode), WAL so readers and one writer do not
block each other, synchronous=FULL so an acknowledged join or revocation survives a power
cut. The master sees another process's change at its next call (SQLite's data_version)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from tcluster.master.identity.records import (TokenRow, User, check_token, match_digest, name_taken, new_join_token,
                                       raced, user_exists)
from tcluster.security.jointoken import JoinTokenText

AUTH_DB = "auth.db"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS users (
    name TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, unix_user TEXT NOT NULL,
    queues TEXT NOT NULL, admin INTEGER NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS join_tokens (
    id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, created_at REAL NOT NULL, expires_at REAL NOT NULL,
    labels TEXT NOT NULL, used_at REAL, used_by TEXT);
CREATE TABLE IF NOT EXISTS node_certs (
    serial TEXT PRIMARY KEY, node TEXT NOT NULL, issued_at REAL NOT NULL, token_id TEXT NOT NULL,
    labels TEXT NOT NULL, revoked_at REAL);
CREATE INDEX IF NOT EXISTS node_certs_by_node ON node_certs (node);
"""
_USER_COLUMNS = "name, unix_user, queues, admin, created_at"


def open_auth_db(data_dir: Path) -> sqlite3.Connection:
    """The one way to open auth.db (see the module docstring for why each setting)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / AUTH_DB
    _create_private(path)
    db = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA busy_timeout=10000")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.executescript(_SCHEMA)
    return db


def _create_private(path: Path) -> None:
    """Creates the file 0600 if it is missing, and never opens (so never closes) an existing
    one: closing any descriptor of a file drops every POSIX lock this process holds on it,
    including an open connection's WAL locks; another process closing auth.db would then
    think itself the last user, checkpoint and delete the WAL that connection still writes
    to, and its joins would vanish from everyone else's view."""
    if path.exists():
        return
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        pass


def _user(row: tuple) -> User:  # type: ignore[type-arg]
    return User(row[0], row[1], tuple(json.loads(row[2])), bool(row[3]), row[4])


class SqliteAuthStore:
    """AuthStore over one auth.db connection."""

    def __init__(self, data_dir: Path) -> None:
        self.db = open_auth_db(data_dir)
        self._version = -1
        self._digests: list[tuple[str, User]] = []
        self._closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.db.close()

    # ---- users ----

    def add_user(self, user: User, token_digest: str) -> None:
        try:
            self.db.execute("INSERT INTO users VALUES (?,?,?,?,?,?)",
                            (user.name, token_digest, user.unix_user, json.dumps(list(user.grants)),
                             int(user.admin), user.created_at))
        except sqlite3.IntegrityError:
            raise user_exists(user.name) from None

    def list_users(self) -> list[User]:
        rows = self.db.execute(f"SELECT {_USER_COLUMNS} FROM users ORDER BY name").fetchall()
        return [_user(r) for r in rows]

    def user_named(self, name: str) -> User | None:
        row = self.db.execute(f"SELECT {_USER_COLUMNS} FROM users WHERE name=?", (name,)).fetchone()
        return _user(row) if row is not None else None

    def remove_user(self, name: str) -> bool:
        return self.db.execute("DELETE FROM users WHERE name=?", (name,)).rowcount > 0

    def user_by_digest(self, digest: str) -> User | None:
        # Reloaded only when some connection (ours or another process's) changed the file.
        version = self.db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._version:
            rows = self.db.execute(f"SELECT token_hash, {_USER_COLUMNS} FROM users").fetchall()
            self._digests = [(r[0], _user(r[1:])) for r in rows]
            self._version = version
        return match_digest(self._digests, digest)

    # ---- join tokens ----

    def create_token(self, ttl_s: float, labels: dict[str, str], now: float) -> tuple[str, str]:
        new = new_join_token(ttl_s, labels, now)
        row = new.row
        self.db.execute("INSERT INTO join_tokens (id, secret_hash, created_at, expires_at, labels) VALUES (?,?,?,?,?)",
                        (row.token_id, row.secret_hash, now, row.expires_at, json.dumps(row.labels, sort_keys=True)))
        return row.token_id, new.secret

    def token(self, token_id: str) -> TokenRow | None:
        row = self.db.execute("SELECT id, secret_hash, expires_at, labels, used_at, used_by FROM join_tokens "
                              "WHERE id = ?", (token_id,)).fetchone()
        if row is None:
            return None
        return TokenRow(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5])

    def consume(self, token: JoinTokenText, node: str, now: float) -> dict[str, str]:
        row = self.token(token.token_id)
        check_token(row, token.secret, now)
        assert row is not None
        used = self.db.execute("UPDATE join_tokens SET used_at = ?, used_by = ? WHERE id = ? AND used_at IS NULL",
                               (now, node, token.token_id))
        if used.rowcount != 1:   # another join won the race for this token
            raise raced(token.token_id)
        return row.labels

    # ---- node certificates ----

    def check_name_free(self, node: str) -> None:
        row = self.db.execute("SELECT serial FROM node_certs WHERE node = ? AND revoked_at IS NULL LIMIT 1",
                              (node,)).fetchone()
        if row is not None:
            raise name_taken(node, row[0])

    def admit(self, token: JoinTokenText, node: str, serial: str, now: float) -> dict[str, str]:
        """A crash (or a failed write) in between leaves the token unspent and no
        certificate on record, so the same token can join again."""
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
        row = self.db.execute("SELECT node, labels, revoked_at FROM node_certs WHERE serial = ?", (serial,)).fetchone()
        if row is None or row[2] is not None:
            return None
        return row[0], json.loads(row[1])

    def revoke_node(self, node: str, now: float) -> int:
        return self.db.execute("UPDATE node_certs SET revoked_at = ? WHERE node = ? AND revoked_at IS NULL",
                               (now, node)).rowcount

    def revoked_serials(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT serial FROM node_certs WHERE revoked_at IS NOT NULL")}
