"""`tcl-master status`: the masters of a store, which one leads, and the store itself.

It reads the store directly (the election's keys in etcd; the data dir with SQLite), so
it answers even when no master runs or leads."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from tcluster.domain.errors import Unavailable
from tcluster.etcd.kv import EtcdKV
from tcluster.master.store.leadership import LeaderInfo
from tcluster.master.identity.choice import add_store_flags, choice_of
from tcluster.etcd.url import StoreUrl, parse_store_url


def add_status_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("status", help="the masters of a store, which one leads, and the store")
    add_store_flags(p)
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.set_defaults(run=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    choice = choice_of(args)             # InvalidArgument naming --store or --store-prefix
    url = parse_store_url(args.store.strip(), args.data_dir)
    report = asyncio.run(_etcd_status(url, choice.prefix)) if choice.etcd else _sqlite_status(url)
    if args.output == "json":
        print(json.dumps(report, indent=2))
    else:
        _print_table(report)
    return 0


def _sqlite_status(url: StoreUrl) -> dict[str, Any]:
    exists = url.path is not None and url.path.exists()
    return {"store": str(url), "election": False, "leader": None, "masters": [],
            "note": "one master per SQLite store (no election)" if exists else "no state yet at this path"}


async def _etcd_status(url: StoreUrl, prefix: str) -> dict[str, Any]:
    kv = EtcdKV(list(url.endpoints), tls=url.tls)
    try:
        masters, _ = await kv.range_prefix(prefix.rstrip("/") + "/masters/")
        leader_kv = await kv.get(prefix.rstrip("/") + "/leader")
        states, _ = await kv.range_prefix(prefix.rstrip("/") + "/state/jobs/")
    except Unavailable as error:
        raise Unavailable(f"cannot read the store: {error}") from None
    finally:
        await kv.close()
    leader = LeaderInfo.decode(leader_kv.value) if leader_kv else None
    rows = []
    for entry in masters:
        info = LeaderInfo.decode(entry.value)
        if info is not None:
            rows.append({"id": info.id, "client": info.client, "agent": info.agent, "http": info.http,
                         "role": "leader" if leader is not None and leader.id == info.id else "standby"})
    return {"store": f"{url} prefix {prefix}", "election": True,
            "leader": leader.id if leader else None,
            "leader_since_revision": leader_kv.create_revision if leader_kv else None,
            "masters": rows, "jobs": len(states)}


def _print_table(report: dict[str, Any]) -> None:
    out = sys.stdout
    print(f"store:  {report['store']}", file=out)
    if not report["election"]:
        print(report["note"], file=out)
        return
    print(f"leader: {report['leader'] or '(none: election in progress or no master running)'}", file=out)
    print(f"jobs:   {report['jobs']}", file=out)
    if not report["masters"]:
        print("no live master", file=out)
        return
    width = max(len(m["client"]) for m in report["masters"])
    print(f"{'MASTER':<{width}}  {'ROLE':<8}  AGENTS AT", file=out)
    for m in report["masters"]:
        print(f"{m['client']:<{width}}  {m['role']:<8}  {m['agent']}", file=out)
