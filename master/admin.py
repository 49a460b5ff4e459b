"""`tcl-master init | join-token create | node revoke`: offline commands on the data dir.

They write DATA_DIR/pki and DATA_DIR/auth.db directly (SQLite WAL), whether or not the
master runs: it reads auth.db on every check."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import time
from pathlib import Path

from tcluster.agent.settings import parse_labels
from tcluster.errors import FailedPrecondition, InvalidArgument, TclusterError
from tcluster.master.nodeauth import NodeAuth
from tcluster.master.users import bootstrap_admin
from tcluster.security.jointoken import JoinTokenText
from tcluster.security.pki import MasterPki, check_node_name, init_pki, load_master_pki, master_sans

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration_s(text: str, flag: str) -> float:
    match = _DURATION.match(text.strip())
    if not match:
        raise InvalidArgument(flag, f"{text[:40]!r} is not a duration; use e.g. 90s, 30m, 1h, 2d")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def add_admin_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    init = sub.add_parser("init", help="create the cluster CA and the master's certificate")
    init.add_argument("--data-dir", default=".tcluster", type=Path, help="the master's state directory")
    init.add_argument("--advertise", default="", metavar="NAMES",
                      help="comma-separated DNS names and IPs agents and users dial (added to the certificate)")
    init.set_defaults(run=cmd_init)

    tokens = sub.add_parser("join-token", help="join tokens for new nodes").add_subparsers(dest="action", required=True)
    create = tokens.add_parser("create", help="print a short-lived, single-use token for one node to join")
    create.add_argument("--data-dir", default=".tcluster", type=Path)
    create.add_argument("--ttl", default="1h", help="valid for this long (default %(default)s; at most 7d)")
    create.add_argument("--labels", default="", help="node labels k=v,k2=v2 the joined node gets")
    create.add_argument("-o", "--output", choices=("table", "json"), default="table")
    create.set_defaults(run=cmd_join_token_create)

    node = sub.add_parser("node", help="node identities").add_subparsers(dest="action", required=True)
    revoke = node.add_parser("revoke", help="stop a node from connecting with the certificates it holds")
    revoke.add_argument("name")
    revoke.add_argument("--data-dir", default=".tcluster", type=Path)
    revoke.set_defaults(run=cmd_node_revoke)


def _require_pki(data_dir: Path) -> MasterPki:
    pki = load_master_pki(data_dir)
    if pki is None:
        raise FailedPrecondition(f"{data_dir} has no cluster CA; run `tcl-master init --data-dir {data_dir}` first")
    return pki


def cmd_init(args: argparse.Namespace) -> int:
    advertise = [a for a in args.advertise.split(",") if a.strip()]
    master_sans(advertise)   # a bad name stops here, before anything is written
    pki = init_pki(args.data_dir, advertise)
    NodeAuth(args.data_dir).close()   # auth.db with its tables (0600)
    admin_token = bootstrap_admin(args.data_dir)
    names = ", ".join(advertise + ["master.tcluster", "localhost", "127.0.0.1", "::1"])
    d = args.data_dir
    print(f"""tcl-master: initialised a new cluster in {d}
  CA fingerprint: {pki.fingerprint}
  master certificate valid for: {names}
  keys: {d}/pki/*.key (0600; never leave this directory)
  first admin user `admin` (its token is shown only this once):
    {admin_token}

Next:
  1. start the master (client port TLS; agents use the next port with mutual TLS):
       tcl-master --data-dir {d} --listen 0.0.0.0:7070
  2. for each node, make a join token here, then join on the node:
       tcl-master join-token create --data-dir {d} [--labels rack=r1]
       tcl-agent join --master HOST:7070 --token TOKEN     # then start tcl-agent (or its unit)
  3. add users: tcl-master user add NAME --unix-user NAME --queues 'PATTERN', then on their machines: tcl login""")
    return 0


def cmd_join_token_create(args: argparse.Namespace) -> int:
    ttl_s = parse_duration_s(args.ttl, "--ttl")
    try:
        labels = parse_labels(args.labels)
    except ValueError as error:
        raise InvalidArgument("--labels", str(error)) from None
    pki = _require_pki(args.data_dir)
    auth = NodeAuth(args.data_dir)
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
    auth = NodeAuth(args.data_dir)
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
