"""Users: names, hashed tokens, Unix mappings and queue grants, in the identity store
(DATA_DIR/auth.db, or etcd under P/auth/users: master/identity/choice.py); the account
checks and the single-master forms are master/identity/accounts.py.

`tcl-master user add|list|remove` write the store directly (no master needed); a running
master reads it through UserDirectory, which sees another process's change at the next
call, so a user added while the master runs works at once and a removed one is refused.
Only sha256 of each token's secret is stored; a token is printed once, when it is made,
and never logged."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tcluster.domain.errors import Unauthenticated
from tcluster.master.identity.accounts import check_user, create_user, parse_grants
from tcluster.master.identity.records import AuthStore
from tcluster.master.identity.choice import add_store_flags, choice_of, load_chosen_pki, open_chosen
from tcluster.master.identity.sqlite import AUTH_DB, SqliteAuthStore
from tcluster.security.authz import Caller
from tcluster.security.tokens import hash_secret, parse_token

NO_TOKEN = "no token: log in with `tcl login --master HOST:PORT` or set TCL_TOKEN"
UNKNOWN_TOKEN = "the token is not known to this master (removed, or for another cluster?)"
__all__ = ["AUTH_DB", "NO_TOKEN", "UNKNOWN_TOKEN", "UserDirectory", "add_user_commands"]


class UserDirectory:
    """The running master's view of the users: resolves bearer tokens.

    Given a data dir it opens (and closes) DATA_DIR/auth.db itself; given a store, the
    store belongs to the caller (the master shares one with its node guard)."""

    def __init__(self, source: Path | AuthStore) -> None:
        self._owned = isinstance(source, Path)
        self.store: AuthStore = SqliteAuthStore(source) if isinstance(source, Path) else source

    def resolve(self, token: str) -> Caller:
        """The caller a bearer token names; Unauthenticated (never echoing it) otherwise."""
        if not token:
            raise Unauthenticated(NO_TOKEN)
        found = self.store.user_by_digest(hash_secret(parse_token(token).secret))
        if found is None:
            raise Unauthenticated(UNKNOWN_TOKEN)
        return found.caller()

    def close(self) -> None:
        if self._owned:
            self.store.close()


# ---- `tcl-master user ...` ----

def add_user_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        add_store_flags(p)


def _cmd_add(args: argparse.Namespace) -> int:
    grants = parse_grants(args.queues)
    check_user(args.name, args.unix_user)     # before any store is opened
    choice = choice_of(args)
    pki = load_chosen_pki(choice)
    store = open_chosen(choice)
    try:
        token = create_user(store, args.name, args.unix_user, grants, args.admin, pki.fingerprint if pki else "")
    finally:
        store.close()
    print(token)
    print(f"user {args.name} added (runs as {args.unix_user}, queues: {args.queues or 'none'}"
          f"{', admin' if args.admin else ''}). The token above is shown only once; they log in with\n"
          f"  tcl login --master HOST:PORT    (and paste it)", file=sys.stderr)
    if pki is None:
        print(f"note: {choice.describe()} has no cluster CA yet: until `tcl-master init` there, the master checks "
              "no tokens (everyone is an admin) and this token pins no CA (`tcl login` then needs --ca)",
              file=sys.stderr)
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    store = open_chosen(choice_of(args))
    try:
        users = store.list_users()
    finally:
        store.close()
    if args.output == "json":
        print(json.dumps([{"name": u.name, "unix_user": u.unix_user, "queues": list(u.grants), "admin": u.admin,
                           "created_at": u.created_at} for u in users], indent=2))
        return 0
    print(f"{'NAME':<16} {'UNIX USER':<12} {'ROLE':<6} QUEUES")
    for u in users:
        print(f"{u.name:<16} {u.unix_user or '-':<12} {'admin' if u.admin else 'user':<6} {','.join(u.grants) or '-'}")
    return 0


def _cmd_remove(args: argparse.Namespace) -> int:
    store = open_chosen(choice_of(args))
    try:
        removed = store.remove_user(args.name)
    finally:
        store.close()
    if not removed:
        print(f"tcl-master: no user {args.name!r}", file=sys.stderr)
        return 1
    print(f"user {args.name} removed", file=sys.stderr)
    return 0
