"""`tcl top`: a live view of what runs, like `kubectl top` / `htop`, over the existing gRPC
API (List of RUNNING jobs with their tasks' newest usage, ListNodes, ListQueues).

Tasks (default), `--nodes` or `--queues`, sorted by CPU or memory, requested vs used,
redrawn every 2 s until Ctrl-C; `--once` draws one screen, `-o json` prints one snapshot."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable

from tcluster.cli.client import MasterClient
from tcluster.cli.options import EXIT_OK
from tcluster.formats import format_table
from tcluster.model import JobState
from tcluster.v1 import common_pb2
from tcluster.wire import job_state_to_pb, usage_from_pb

CLEAR = "\x1b[H\x1b[2J"


def _mib(n: float) -> str:
    return f"{n / 2**20:.0f}Mi" if n < 10 * 2**30 else f"{n / 2**30:.1f}Gi"


def _ratio(used: float, of: float) -> str:
    return f"{100 * used / of:.0f}%" if of else "-"


def running_tasks(client: MasterClient) -> list[dict[str, Any]]:
    jobs, _ = client.list_jobs([job_state_to_pb(JobState.RUNNING)], "", 0, all_jobs=True)
    rows = []
    for job in jobs:
        request = job.spec.resources
        for task in job.tasks:
            if task.state != common_pb2.TASK_RUNNING:
                continue
            u = task.usage
            rows.append({
                "job_id": job.id, "name": job.spec.name, "task": task.index, "node": task.node,
                "queue": job.spec.queue, "user": job.spec.user, "cpu_rate": u.cpu_rate,
                "cpu_request": request.cpu, "cpu_limit": job.spec.cpu_limit,
                "memory_working_set_bytes": usage_from_pb(u).working_set_bytes,
                "memory_cache_bytes": u.memory_file_bytes, "memory_limit_bytes": int(request.memory),
                "memory_peak_bytes": u.memory_peak_bytes, "pids": u.pids, "oom_kills": u.oom_kills,
                "net_tx_rate": u.net_tx_rate, "net_rx_rate": u.net_rx_rate,
                "net_request": request.other.get("net", 0.0),
            })
    return rows


def node_rows(client: MasterClient, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for node in client.list_nodes():
        mine = [t for t in tasks if t["node"] == node.name]
        out.append({
            "name": node.name, "state": node.state, "tasks": len(node.tasks),
            "cpu_used": sum(t["cpu_rate"] for t in mine), "cpu_allocated": node.capacity.cpu - node.free.cpu,
            "cpu_capacity": node.capacity.cpu,
            "memory_used_bytes": sum(t["memory_working_set_bytes"] for t in mine),
            "memory_allocated_bytes": int(node.capacity.memory - node.free.memory),
            "memory_capacity_bytes": int(node.capacity.memory),
        })
    return out


def queue_rows(client: MasterClient, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for q in client.list_queues().queues:
        if not q.path:
            continue
        mine = [t for t in tasks if t["queue"] == q.path or t["queue"].startswith(q.path + ".")]
        out.append({"path": q.path, "depth": q.depth, "guaranteed_share": q.guaranteed_share,
                    "dominant_share": q.dominant_share, "running_tasks": q.running_tasks,
                    "pending_tasks": q.pending_tasks, "cpu_used": sum(t["cpu_rate"] for t in mine),
                    "memory_used_bytes": sum(t["memory_working_set_bytes"] for t in mine)})
    return out


def snapshot(args: argparse.Namespace, client: MasterClient) -> tuple[str, list[dict[str, Any]]]:
    tasks = running_tasks(client)
    if args.nodes:
        rows, key = node_rows(client, tasks), ("cpu_used" if args.sort == "cpu" else "memory_used_bytes")
        return "nodes", sorted(rows, key=lambda r: (-r[key], r["name"]))
    if args.queues:
        rows, key = queue_rows(client, tasks), ("cpu_used" if args.sort == "cpu" else "memory_used_bytes")
        return "queues", sorted(rows, key=lambda r: (-r[key], r["path"]))
    key = "cpu_rate" if args.sort == "cpu" else "memory_working_set_bytes"
    return "tasks", sorted(tasks, key=lambda r: (-r[key], r["job_id"], r["task"]))


def render(kind: str, rows: list[dict[str, Any]], limit: int) -> str:
    rows = rows[:limit] if limit else rows
    if kind == "nodes":
        return format_table(("NODE", "STATE", "CPU USED", "ALLOC", "CAP", "MEM USED", "ALLOC", "CAP", "TASKS"), [
            (r["name"], r["state"], f"{r['cpu_used']:.2f}", f"{r['cpu_allocated']:.2f}", f"{r['cpu_capacity']:.2f}",
             _mib(r["memory_used_bytes"]), _mib(r["memory_allocated_bytes"]), _mib(r["memory_capacity_bytes"]),
             str(r["tasks"])) for r in rows])
    if kind == "queues":
        return format_table(("QUEUE", "GUARANTEED", "SHARE", "CPU USED", "MEM USED", "RUNNING", "PENDING"), [
            ("  " * (r["depth"] - 1) + r["path"], f"{r['guaranteed_share']:.3f}", f"{r['dominant_share']:.3f}",
             f"{r['cpu_used']:.2f}", _mib(r["memory_used_bytes"]), str(r["running_tasks"]), str(r["pending_tasks"]))
            for r in rows])
    return format_table(("JOB", "NAME", "TASK", "NODE", "CPU", "/REQ", "CPU%", "MEM", "/LIMIT", "MEM%", "PIDS",
                         "NET TX", "/REQ"), [
        (r["job_id"], r["name"] or "-", str(r["task"]), r["node"], f"{r['cpu_rate']:.2f}", f"{r['cpu_request']:g}",
         _ratio(r["cpu_rate"], r["cpu_request"]), _mib(r["memory_working_set_bytes"]), _mib(r["memory_limit_bytes"]),
         _ratio(r["memory_working_set_bytes"], r["memory_limit_bytes"]), str(r["pids"]),
         _bits(r["net_tx_rate"]), _bits(r["net_request"])) for r in rows])


def _bits(rate: float) -> str:
    """bits/s the way `--net` takes them: 19.2Mbit; '-' for none."""
    for unit, size in (("Gbit", 1e9), ("Mbit", 1e6), ("Kbit", 1e3)):
        if rate >= size:
            return f"{rate / size:.1f}{unit}"
    return f"{rate:.0f}bit" if rate else "-"


def top(args: argparse.Namespace, client: MasterClient,
        sleep: Callable[[float], None] = time.sleep, out: Any = None) -> int:
    out = out or sys.stdout
    if args.output == "json":
        kind, rows = snapshot(args, client)
        print(json.dumps({kind: rows}, indent=2), file=out)
        return EXIT_OK
    try:
        while True:
            kind, rows = snapshot(args, client)
            header = f"tcl top — {len(rows)} {kind} — {time.strftime('%H:%M:%S')} — sorted by {args.sort}"
            screen = header + "\n\n" + render(kind, rows, args.limit)
            out.write(screen + "\n" if args.once else CLEAR + screen + "\n")
            out.flush()
            if args.once:
                return EXIT_OK
            sleep(max(0.2, args.interval))
    except KeyboardInterrupt:
        return EXIT_OK

