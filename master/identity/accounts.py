"""User accounts in the identity store: names, Unix mappings, queue grants and tokens
(shown once; only a hash is kept). The checks every form shares, and the single-master
forms on DATA_DIR/auth.db that `tcl dev`, `tcl-master init` and the tests use; the
store-choosing commands are master/identity/users.py."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tcluster.domain.errors import InvalidArgument
from tcluster.master.identity.records import AuthStore, User
from tcluster.master.identity.sqlite import SqliteAuthStore
from tcluster.security.tokens import new_token, token_hash

_NAME = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
_UNIX = re.compile(r"^([a-z_][a-z0-9_.-]{0,31}\$?|[0-9]{1,10})$")
_GRANT = re.compile(r"^[A-Za-z0-9_.*?\[\]!-]{1,128}$")


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


def ca_pin(data_dir: Path) -> str:
    """The cluster CA's fingerprint for new tokens, or "" for a master without TLS."""
    ca = data_dir / "pki" / "ca.crt"
    if not ca.exists():
        return ""
    from tcluster.security.certs import ca_fingerprint   # only a secure master has one
    return ca_fingerprint(ca.read_bytes())


def create_user(store: AuthStore, name: str, unix_user: str, grants: tuple[str, ...], admin: bool,
                pin: str) -> str:
    """Returns the new user's token, pinning the CA `pin` (shown once; only its hash is kept)."""
    check_user(name, unix_user)
    token = new_token(pin)
    store.add_user(User(name, unix_user, grants, admin, time.time()), token_hash(token))
    return token


# The single-master forms, on DATA_DIR/auth.db (tcl dev and the tests use them).

def add_user(data_dir: Path, name: str, unix_user: str, grants: tuple[str, ...], admin: bool) -> str:
    store = SqliteAuthStore(data_dir)
    try:
        return create_user(store, name, unix_user, grants, admin, ca_pin(data_dir))
    finally:
        store.close()


def list_users(data_dir: Path) -> list[User]:
    store = SqliteAuthStore(data_dir)
    try:
        return store.list_users()
    finally:
        store.close()


def remove_user(data_dir: Path, name: str) -> bool:
    store = SqliteAuthStore(data_dir)
    try:
        return store.remove_user(name)
    finally:
        store.close()


def bootstrap_admin(data_dir: Path, name: str = "admin", unix_user: str = "") -> str:
    """The first admin, for `tcl-master init`: its token is printed once."""
    return add_user(Path(data_dir), name, unix_user, ("*",), admin=True)


__all__ = ["add_user", "bootstrap_admin", "ca_pin", "check_user", "create_user", "list_users", "parse_grants",
           "remove_user"]
