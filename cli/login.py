"""`tcl login` and `tcl whoami`.

login authenticates the master before the token leaves this host: the cluster CA is the
one pinned in the token (fetched from the master and kept only if its sha256 matches), or
the PEM file given with --ca. Then one call (WhoAmI) checks the token, and the master
address, the CA and the token are stored for later commands (cli/credentials.py)."""

from __future__ import annotations

import argparse
import getpass
import json
import sys

import grpc

from tcluster.cli.client import MasterClient, check_master_list, rpc_status
from tcluster.cli.options import DEFAULT_WAIT_LEADER_S, EXIT_FAILURE, EXIT_OK
from tcluster.cli.credentials import Credentials, cluster_ca, credentials_for, save_credentials
from tcluster.domain.errors import InvalidArgument, Unauthenticated
from tcluster.security.tokens import parse_token


def _read_token(args: argparse.Namespace) -> str:
    if args.token:
        return str(args.token).strip()
    if sys.stdin.isatty():
        return getpass.getpass("token: ").strip()
    return sys.stdin.readline().strip()


def login(args: argparse.Namespace) -> int:
    from tcluster.security.bootstrap import PinMismatch
    from tcluster.security.nodekeys import OpensslMissing
    master = check_master_list(args.master)
    token = _read_token(args)
    try:
        pin = parse_token(token).ca_fingerprint
    except Unauthenticated as error:
        raise InvalidArgument("--token", str(error)) from None
    try:
        ca_pem = cluster_ca(master, pin, args.ca)
    except (PinMismatch, OpensslMissing) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILURE
    except OSError as error:
        print(f"error: cannot reach the master at {master}: {error.strerror or error}", file=sys.stderr)
        return EXIT_FAILURE
    credentials = Credentials(token, ca_pem)
    with MasterClient(master, credentials=credentials,
                      wait_leader_s=getattr(args, "wait_leader_s", DEFAULT_WAIT_LEADER_S)) as client:
        who = client.whoami()      # an RpcError (e.g. UNAUTHENTICATED) is reported by `tcl`
    path = save_credentials(master, credentials)
    print(f"logged in to {master} as {who.name} ({_role(who)}); credentials in {path}", file=sys.stderr)
    return EXIT_OK


def login_hint(error: grpc.RpcError, master: str) -> str:
    """A plaintext call that a TLS master hung up on reads like an unreachable master: say
    what is more likely missing. "" when it does not apply."""
    code, details = rpc_status(error)
    if code != grpc.StatusCode.UNAVAILABLE or "socket closed" not in details.lower():
        return ""
    try:
        stored = credentials_for(master)
        if stored.ca_pem or stored.ca_pin:   # TLS was used (or the CA fetch said why not)
            return ""
    except InvalidArgument:
        return ""
    return f"hint: a master with TLS (after `tcl-master init`) needs a login first: tcl login --master {master}"


def _role(who: object) -> str:
    admin, unix_user, queues = getattr(who, "admin"), getattr(who, "unix_user"), list(getattr(who, "queues"))
    runs_as = unix_user or "the agent's default user"
    return f"{'admin' if admin else 'user'}, tasks run as {runs_as}, queues {', '.join(queues) or 'none'}"


def whoami(args: argparse.Namespace, client: MasterClient) -> int:
    who = client.whoami()
    if args.output == "json":
        print(json.dumps({"name": who.name, "admin": who.admin, "unix_user": who.unix_user,
                          "queues": list(who.queues), "secure": who.secure, "master": client.address}, indent=2))
        return EXIT_OK
    print(f"{who.name} on {client.address}: {_role(who)}")
    if not who.secure:
        print("(this master checks no tokens: everyone who can reach it is an admin)")
    return EXIT_OK
