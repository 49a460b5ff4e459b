"""Users: names, hashed tokens, Unix mappings and queue grants, in DATA_DIR/auth.db.

`tcl-master user add|list|remove` write the file directly (no master needed); a running
master reads it through UserDirectory, which notices another process's change at the next
call (SQLite's data_version), so a user added while the master runs works at once. Only
sha256 of each token's secret is stored; a token is printed once, when it is made, and
never logged."""

from __future__ import annotations

import argparse
import hmac
import json
import os
import re
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tcluster.errors import InvalidArgument, Unauthenticated
from tcluster.security.authz import Caller
from tcluster.security.tokens import hash_secret, new_token, parse_token, token_hash

AUTH_DB = "auth.db"
_SCHEMA = """CREATE TABLE IF NOT EXISTS users (
    name TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, unix_user TEXT NOT NULL,
    queues TEXT NOT NULL, admin INTEGER NOT NULL, created_at REAL NOT NULL)"""
_NAME = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
_UNIX = re.compile(r"^([a-z_][a-z0-9_.-]{0,31}\$?|[0-9]{1,10})$")
_GRANT = re.compile(r"^[A-Za-z0-9_.*?\[\]!-]{1,128}$")
NO_TOKEN = "no token: log in with `tcl login --master HOST:PORT` or set TCL_TOKEN"
UNKNOWN_TOKEN = "the token is not known to this master (removed, or for another cluster?)"


@dataclass(frozen=True)
class User:
    name: str
    unix_user: str
    grants: tuple[str, ...]
    admin: bool
    created_at: float

    def caller(self) -> Caller:
        return Caller(self.name, self.admin, self.unix_user, self.grants)


def parse_grants(text: str) -> tuple[str, ...]:
    """'ads.*, eng.ml' -> ('ads.*', 'eng.ml'); raises InvalidArgument."""
    grants = tuple(g.strip() for g in text.split(",") if g.strip())
    for grant in grants:
        if not _GRANT.match(grant):
            raise InvalidArgument("--queues", f"{grant[:64]!r} is not a queue glob like 'ads.*' or 'eng.ml'")
    return grants


def check_user(name: str, unix_user: str) -> None:
    if not _NAME.match(name):
        raise InvalidArgument("name", f"{name[:64]!r} is not allowed; use 1-32 of a-z 0-9 _ . - starting with a letter or _")
    if unix_user and not _UNIX.match(unix_user):
        raise InvalidArgument("--unix-user", f"{unix_user[:64]!r} is not a Unix user name or uid")


def open_auth_db(data_dir: Path) -> sqlite3.Connection:
    """Made 0600 before SQLite opens it (its journals take the same mode)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / AUTH_DB
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA busy_timeout=5000")
    db.execute(_SCHEMA)
    return db


def _user(row: tuple) -> User:  # type: ignore[type-arg]
    return User(row[0], row[1], tuple(json.loads(row[2])), bool(row[3]), row[4])


def ca_pin(data_dir: Path) -> str:
    """The cluster CA's fingerprint for new tokens, or "" for a master without TLS."""
    ca = data_dir / "pki" / "ca.crt"
    if not ca.exists():
        return ""
    from tcluster.security.pki import ca_fingerprint   # only a secure master has one
    return ca_fingerprint(ca.read_bytes())


def add_user(data_dir: Path, name: str, unix_user: str, grants: tuple[str, ...], admin: bool) -> str:
    """Returns the new user's token (shown once; only its hash is kept)."""
    check_user(name, unix_user)
    token = new_token(ca_pin(data_dir))
    db = open_auth_db(data_dir)
    try:
        db.execute("INSERT INTO users VALUES (?,?,?,?,?,?)",
                   (name, token_hash(token), unix_user, json.dumps(list(grants)), int(admin), time.time()))
    except sqlite3.IntegrityError:
        raise InvalidArgument("name", f"user {name} exists; remove it first to issue a new token") from None
    finally:
        db.close()
    return token


def list_users(data_dir: Path) -> list[User]:
    db = open_auth_db(data_dir)
    try:
        rows = db.execute("SELECT name, unix_user, queues, admin, created_at FROM users ORDER BY name").fetchall()
    finally:
        db.close()
    return [_user(r) for r in rows]


def remove_user(data_dir: Path, name: str) -> bool:
    db = open_auth_db(data_dir)
    try:
        return db.execute("DELETE FROM users WHERE name=?", (name,)).rowcount > 0
    finally:
        db.close()


def bootstrap_admin(data_dir: Path, name: str = "admin", unix_user: str = "") -> str:
    """The first admin, for `tcl-master init`: its token is printed once."""
    return add_user(Path(data_dir), name, unix_user, ("*",), admin=True)


class UserDirectory:
    """The running master's view of auth.db: reloaded when another process changed it."""

    def __init__(self, data_dir: Path) -> None:
        self._db = open_auth_db(data_dir)
        self._version = -1
        self._users: list[tuple[str, User]] = []

    def _fresh(self) -> list[tuple[str, User]]:
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._version:
            rows = self._db.execute(
                "SELECT token_hash, name, unix_user, queues, admin, created_at FROM users").fetchall()
            self._users = [(r[0], _user(r[1:])) for r in rows]
            self._version = version
        return self._users

    def resolve(self, token: str) -> Caller:
        """The caller a bearer token names; Unauthenticated (never echoing it) otherwise."""
        if not token:
            raise Unauthenticated(NO_TOKEN)
        digest = hash_secret(parse_token(token).secret).encode()
        found = None
        for stored, user in self._fresh():     # every row compared, in constant time each
            if hmac.compare_digest(digest, stored.encode()):
                found = user
        if found is None:
            raise Unauthenticated(UNKNOWN_TOKEN)
        return found.caller()

    def close(self) -> None:
        self._db.close()


# ---- `tcl-master user ...` ----

def add_user_commands(subparsers: argparse._SubParsersAction) -> None:
    user = subparsers.add_parser("user", help="users: add (prints a token once), list, remove")
    commands = user.add_subparsers(dest="user_command", metavar="COMMAND", required=True)
    add = commands.add_parser("add", help="add a user and print their token (once)")
    add.add_argument("name")
    add.add_argument("--unix-user", required=True, metavar="U", help="the Unix user their tasks run as")
    add.add_argument("--queues", default="", metavar="GLOBS",
                     help="queues they may submit to, comma-separated globs over queue paths, e.g. 'ads.*,eng.ml'")
    add.add_argument("--admin", action="store_true", help="may do everything (other users' jobs, --user)")
    add.set_defaults(run=_cmd_add)
    listing = commands.add_parser("list", help="list users (never their tokens)")
    listing.add_argument("-o", "--output", choices=("table", "json"), default="table")
    listing.set_defaults(run=_cmd_list)
    remove = commands.add_parser("remove", help="remove a user; their token stops working at once")
    remove.add_argument("name")
    remove.set_defaults(run=_cmd_remove)
    for p in (add, listing, remove):
        p.add_argument("--data-dir", default=Path(".tcluster"), type=Path, help="the master's state directory")


def _cmd_add(args: argparse.Namespace) -> int:
    token = add_user(args.data_dir, args.name, args.unix_user, parse_grants(args.queues), args.admin)
    print(token)
    print(f"user {args.name} added (runs as {args.unix_user}, queues: {args.queues or 'none'}"
          f"{', admin' if args.admin else ''}). The token above is shown only once; they log in with\n"
          f"  tcl login --master HOST:PORT    (and paste it)", file=sys.stderr)
    if not ca_pin(args.data_dir):
        print(f"note: {args.data_dir} has no cluster CA yet: until `tcl-master init` there, the master checks no "
              "tokens (everyone is an admin) and this token pins no CA (`tcl login` then needs --ca)", file=sys.stderr)
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    users = list_users(args.data_dir)
    if args.output == "json":
        print(json.dumps([{"name": u.name, "unix_user": u.unix_user, "queues": list(u.grants), "admin": u.admin,
                           "created_at": u.created_at} for u in users], indent=2))
        return 0
    print(f"{'NAME':<16} {'UNIX USER':<12} {'ROLE':<6} QUEUES")
    for u in users:
        print(f"{u.name:<16} {u.unix_user or '-':<12} {'admin' if u.admin else 'user':<6} {','.join(u.grants) or '-'}")
    return 0


def _cmd_remove(args: argparse.Namespace) -> int:
    if not remove_user(args.data_dir, args.name):
        print(f"tcl-master: no user {args.name!r}", file=sys.stderr)
        return 1
    print(f"user {args.name} removed", file=sys.stderr)
    return 0
