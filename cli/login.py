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
from pathlib import Path

import grpc

from tcluster.cli.client import MasterClient, check_master_list, rpc_status
from tcluster.cli.options import DEFAULT_WAIT_LEADER_S, EXIT_FAILURE, EXIT_OK
from tcluster.cli.credentials import Credentials, credentials_for, save_credentials
from tcluster.errors import InvalidArgument, Unauthenticated
from tcluster.leaders import parse_addresses
from tcluster.security.tokens import parse_token

FETCH_TIMEOUT_S = 10.0


def _read_token(args: argparse.Namespace) -> str:
    if args.token:
        return str(args.token).strip()
    if sys.stdin.isatty():
        return getpass.getpass("token: ").strip()
    return sys.stdin.readline().strip()


def _cluster_ca(master: str, pin: str, ca_file: Path | None) -> bytes:
    """The CA to trust for this master; raises InvalidArgument or PinMismatch."""
    from tcluster.security.bootstrap import fetch_pinned_ca   # pulls in cryptography: only here
    from tcluster.security.pki import ca_fingerprint
    if ca_file is not None:
        try:
            ca_pem = ca_file.read_bytes()
            fingerprint = ca_fingerprint(ca_pem)
        except (OSError, ValueError) as error:
            raise InvalidArgument("--ca", f"{str(ca_file)[:200]} is not a readable PEM certificate ({error})") from None
        if pin and pin != fingerprint:
            raise InvalidArgument("--ca", f"{str(ca_file)[:200]} is {fingerprint}, but the token pins {pin}")
        return ca_pem
    if not pin:
        raise InvalidArgument("--ca", "the token pins no cluster CA; give the CA file with --ca FILE")
    addresses = parse_addresses(master, "--master")
    for address in addresses[:-1]:   # every master of a cluster presents its CA; the first reached will do
        try:
            return fetch_pinned_ca(address, pin, FETCH_TIMEOUT_S)
        except OSError:
            continue                 # a PinMismatch is not skipped: that master is not who the token says
    return fetch_pinned_ca(addresses[-1], pin, FETCH_TIMEOUT_S)


def login(args: argparse.Namespace) -> int:
    from tcluster.security.bootstrap import PinMismatch
    master = check_master_list(args.master)
    token = _read_token(args)
    try:
        pin = parse_token(token).ca_fingerprint
    except Unauthenticated as error:
        raise InvalidArgument("--token", str(error)) from None
    try:
        ca_pem = _cluster_ca(master, pin, args.ca)
    except PinMismatch as error:
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
        if credentials_for(master).ca_pem:
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
