"""`tcl-gm queues {list,set,remove}`: the operator's view and change of the federation's
queue map in etcd (a running GM sees a change through its watch, at once)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from tcluster.domain.errors import Unavailable
from tcluster.gm.fedetcd import etcd_url, set_queues
from tcluster.gm.settings import pairs
from tcluster.etcd.url import check_prefix


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tcl-gm queues", description="Show or change the queue -> home GM map in etcd.")
    p.add_argument("action", choices=["list", "set", "remove"])
    p.add_argument("queues", nargs="?", default="", help="set: a=gm0,b=gm1; remove: a,b")
    p.add_argument("--etcd", required=True, help="etcd endpoints HOST:PORT[,HOST:PORT] (as tcl-gm --etcd)")
    p.add_argument("--etcd-prefix", default="/tcluster-gm", help="key prefix (default /tcluster-gm)")
    return p


def _mapping(text: str) -> dict[str, str]:
    """The `set` argument; ValueError naming the argument (`queues: 'x' is not NAME=VALUE ...`)."""
    try:
        return dict(pairs(text))
    except ValueError as e:
        raise ValueError(f"queues: {e}") from None


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        url, prefix = etcd_url(args.etcd), check_prefix(args.etcd_prefix)
        mapping = _mapping(args.queues) if args.action == "set" else {}
    except ValueError as e:
        print(f"tcl-gm queues: {e}", file=sys.stderr)
        return 2
    remove = [q.strip() for q in args.queues.split(",") if q.strip()] if args.action == "remove" else []
    if args.action != "list" and not (mapping or remove):
        print(f"tcl-gm queues {args.action}: name the queues (set: a=gm0,b=gm1; remove: a,b)", file=sys.stderr)
        return 2
    try:
        result = asyncio.run(set_queues(url, prefix, mapping, remove))
    except Unavailable as e:
        print(f"tcl-gm queues: {e}", file=sys.stderr)
        return 1
    for queue, home in sorted(result.items()):
        print(f"{queue}={home}")
    return 0
