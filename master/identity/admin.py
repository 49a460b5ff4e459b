"""`tcl-master init | join-token create | node revoke` (and `gm issue | revoke`, gmadmin.py): offline commands on the identity store.

They write the store directly (DATA_DIR/pki and DATA_DIR/auth.db, or etcd with --store),
whether or not the master runs: it reads the store on every check."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import time

from tcluster.domain.constraints import parse_labels
from tcluster.domain.errors import FailedPrecondition, InvalidArgument, TclusterError
from tcluster.master.identity.choice import StoreChoice, add_store_flags, choice_of, init_identity, load_chosen_pki, open_chosen
from tcluster.security.jointoken import JoinTokenText
from tcluster.security.certs import check_node_name
from tcluster.security.pki import MasterPki

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration_s(text: str, flag: str) -> float:
    match = _DURATION.match(text.strip())
    if not match:
        raise InvalidArgument(flag, f"{text[:40]!r} is not a duration; use e.g. 90s, 30m, 1h, 2d")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def add_admin_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    init = sub.add_parser("init", help="create the cluster CA and the master's certificate")
    add_store_flags(init)
    init.add_argument("--advertise", default="", metavar="NAMES",
                      help="comma-separated DNS names and IPs agents and users dial (added to the certificate)")
    init.set_defaults(run=cmd_init)

    tokens = sub.add_parser("join-token", help="join tokens for new nodes").add_subparsers(dest="action", required=True)
    create = tokens.add_parser("create", help="print a short-lived, single-use token for one node to join")
    add_store_flags(create)
    create.add_argument("--ttl", default="1h", help="valid for this long (default %(default)s; at most 7d)")
    create.add_argument("--labels", default="", help="node labels k=v,k2=v2 the joined node gets")
    create.add_argument("-o", "--output", choices=("table", "json"), default="table")
    create.set_defaults(run=cmd_join_token_create)

    node = sub.add_parser("node", help="node identities").add_subparsers(dest="action", required=True)
    revoke = node.add_parser("revoke", help="stop a node from connecting with the certificates it holds")
    revoke.add_argument("name")
    add_store_flags(revoke)
    revoke.set_defaults(run=cmd_node_revoke)
    from tcluster.master.identity.gmadmin import add_gm_commands
    add_gm_commands(sub)


def _require_pki(choice: StoreChoice) -> MasterPki:
    pki = load_chosen_pki(choice)
    if pki is None:
        raise FailedPrecondition(f"{choice.describe()} has no cluster CA; run `tcl-master init {choice.flags()}` first")
    return pki


def cmd_init(args: argparse.Namespace) -> int:
    advertise = [a for a in args.advertise.split(",") if a.strip()]
    done = init_identity(choice_of(args), advertise)
    names = ", ".join(advertise + ["master.tcluster", "localhost", "127.0.0.1", "::1"])
    where, flags = done.where.describe(), done.where.flags()
    keys = (f"in etcd under {done.where.prefix}/pki (let only the masters reach etcd)" if done.where.etcd
            else f"{where}/pki/*.key (0600; never leave this directory)")
    print(f"""tcl-master: initialised a new cluster in {where}
  CA fingerprint: {done.pki.fingerprint}
  master certificate valid for: {names}
  keys: {keys}
  first admin user `admin` (its token is shown only this once):
    {done.admin_token}

Next:
  1. start the master (client port TLS; agents use the next port with mutual TLS):
       tcl-master {flags} --listen 0.0.0.0:7070
  2. for each node, make a join token here, then join on the node:
       tcl-master join-token create {flags} [--labels rack=r1]
       tcl-agent join --master HOST:7070 --token TOKEN     # then start tcl-agent (or its unit)
  3. add users: tcl-master user add NAME {flags} --unix-user NAME --queues 'PATTERN', then on their machines: tcl login""")
    return 0


def cmd_join_token_create(args: argparse.Namespace) -> int:
    ttl_s = parse_duration_s(args.ttl, "--ttl")
    try:
        labels = parse_labels(args.labels)
    except ValueError as error:
        raise InvalidArgument("--labels", str(error)) from None
    choice = choice_of(args)
    pki = _require_pki(choice)
    auth = open_chosen(choice)
    try:
        now = time.time()
        token_id, secret = auth.create_token(ttl_s, labels, now)
    finally:
        auth.close()
    token = str(JoinTokenText(pki.fingerprint, token_id, secret))
    expires = dt.datetime.fromtimestamp(now + ttl_s, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    if args.output == "json":
        print(json.dumps({"token": token, "id": token_id, "expires_at": now + ttl_s, "labels": labels}))
        return 0
    print(token)
    print(f"(join token {token_id}: single use, expires {expires}"
          f"{', labels ' + args.labels if labels else ''})\n"
          "on the node: tcl-agent join --master HOST:PORT --token <the token above>", file=sys.stderr)
    return 0


def cmd_node_revoke(args: argparse.Namespace) -> int:
    name = check_node_name(args.name, "NAME")
    auth = open_chosen(choice_of(args))
    try:
        count = auth.revoke_node(name, time.time())
    finally:
        auth.close()
    if count == 0:
        raise FailedPrecondition(f"node {name} holds no live certificate (never joined, or already revoked)")
    print(f"revoked {count} certificate(s) of node {name}: it cannot connect any more, and a connected stream "
          "is closed within a few seconds. To let it back: a new join token, then `tcl-agent join` on the node.")
    return 0


def run_admin(parser: argparse.ArgumentParser, argv: list[str]) -> int:
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except InvalidArgument as error:
        print(f"tcl-master {argv[0]}: {error}", file=sys.stderr)
        return 2
    except (TclusterError, OSError) as error:
        print(f"tcl-master {argv[0]}: {error}", file=sys.stderr)
        return 1
