"""`tcl top`: a live view of what runs, like `kubectl top` / `htop`, over the existing gRPC
API (List of RUNNING jobs with their tasks' newest usage, ListNodes, ListQueues).

Tasks (default), `--nodes` or `--queues`, sorted by CPU, memory or GPU, requested vs used,
redrawn every 2 s until Ctrl-C; `--once` draws one screen, `-o json` prints one snapshot.
GPU columns (the task's devices, their mean utilization and the memory used on them, from
NVML through the master's last heartbeat) appear when any task holds a GPU; the JSON
always carries them (null where nothing was measured)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable

from tcluster.cli.client import MasterClient
from tcluster.cli.options import EXIT_OK
from tcluster.views.formats import format_table
from tcluster.domain.model import JobState
from tcluster.v1 import common_pb2
from tcluster.wire.protobuf import job_state_to_pb, usage_from_pb

CLEAR = "\x1b[H\x1b[2J"


def _mib(n: float) -> str:
    return f"{n / 2**20:.0f}Mi" if n < 10 * 2**30 else f"{n / 2**30:.1f}Gi"


def _ratio(used: float, of: float) -> str:
    return f"{100 * used / of:.0f}%" if of else "-"


# What tcl top asks of the master each refresh: the listed tasks' nodes report usage at the
# heartbeat interval for this long, not once per usage interval (issue 26).
WATCH_USAGE_S = 30.0


def running_tasks(client: MasterClient) -> list[dict[str, Any]]:
    jobs, _ = client.list_jobs([job_state_to_pb(JobState.RUNNING)], "", 0, all_jobs=True, watch_usage_s=WATCH_USAGE_S)
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
                "net_request": request.other.get("net", 0.0), **gpu_figures(task),
            })
    return rows


def gpu_figures(task: Any) -> dict[str, Any]:
    """The task's GPU indices, its devices' mean utilization (%) and memory used on them
    (summed); None where NVML gave no sample (no NVML, or not yet sampled)."""
    samples = [g for g in task.gpu_usage if g.index in task.gpus]
    return {"gpus": list(task.gpus),
            "gpu_util_percent": sum(g.util_percent for g in samples) / len(samples) if samples else None,
            "gpu_memory_used_bytes": sum(g.memory_used_bytes for g in samples) if samples else None}


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
            "gpu_allocated": int(node.capacity.other.get("gpu", 0) - node.free.other.get("gpu", 0)),
            "gpu_capacity": int(node.capacity.other.get("gpu", 0)),
            "gpu_memory_used_bytes": sum(t["gpu_memory_used_bytes"] or 0 for t in mine),
        })
    return out


def queue_rows(client: MasterClient, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for q in client.list_queues().queues:
        if not q.path or q.user:     # the root, and users' rows (tcl queues shows those)
            continue
        mine = [t for t in tasks if t["queue"] == q.path or t["queue"].startswith(q.path + ".")]
        out.append({"path": q.path, "depth": q.depth, "guaranteed_share": q.guaranteed_share,
                    "dominant_share": q.dominant_share, "running_tasks": q.running_tasks,
                    "pending_tasks": q.pending_tasks, "cpu_used": sum(t["cpu_rate"] for t in mine),
                    "memory_used_bytes": sum(t["memory_working_set_bytes"] for t in mine),
                    "gpu_allocated": sum(len(t["gpus"]) for t in mine)})
    return out


# The sort key of each view per --sort
SORT_KEYS = {"tasks": {"cpu": "cpu_rate", "memory": "memory_working_set_bytes", "gpu": "gpu_util_percent"},
             "nodes": {"cpu": "cpu_used", "memory": "memory_used_bytes", "gpu": "gpu_allocated"},
             "queues": {"cpu": "cpu_used", "memory": "memory_used_bytes", "gpu": "gpu_allocated"}}


def snapshot(args: argparse.Namespace, client: MasterClient) -> tuple[str, list[dict[str, Any]]]:
    tasks = running_tasks(client)
    if args.nodes:
        kind, rows, name = "nodes", node_rows(client, tasks), "name"
    elif args.queues:
        kind, rows, name = "queues", queue_rows(client, tasks), "path"
    else:
        kind, rows, name = "tasks", tasks, "job_id"
    key = SORT_KEYS[kind][args.sort]
    return kind, sorted(rows, key=lambda r: (-(r[key] or 0), r[name], r.get("task", 0)))


def render(kind: str, rows: list[dict[str, Any]], limit: int) -> str:
    rows = rows[:limit] if limit else rows
    if kind == "nodes":
        gpus = any(r["gpu_capacity"] for r in rows)
        return format_table(("NODE", "STATE", "CPU USED", "ALLOC", "CAP", "MEM USED", "ALLOC", "CAP", "TASKS")
                            + (("GPUS", "GPU MEM") if gpus else ()), [
            (r["name"], r["state"], f"{r['cpu_used']:.2f}", f"{r['cpu_allocated']:.2f}", f"{r['cpu_capacity']:.2f}",
             _mib(r["memory_used_bytes"]), _mib(r["memory_allocated_bytes"]), _mib(r["memory_capacity_bytes"]),
             str(r["tasks"]))
            + (_node_gpu_cells(r) if gpus else ())
            for r in rows])
    if kind == "queues":
        return format_table(("QUEUE", "GUARANTEED", "SHARE", "CPU USED", "MEM USED", "RUNNING", "PENDING"), [
            ("  " * (r["depth"] - 1) + r["path"], f"{r['guaranteed_share']:.3f}", f"{r['dominant_share']:.3f}",
             f"{r['cpu_used']:.2f}", _mib(r["memory_used_bytes"]), str(r["running_tasks"]), str(r["pending_tasks"]))
            for r in rows])
    gpus = any(r.get("gpus") for r in rows)
    return format_table(("JOB", "NAME", "TASK", "NODE", "CPU", "/REQ", "CPU%", "MEM", "/LIMIT", "MEM%", "PIDS",
                         "NET TX", "/REQ") + (("GPUS", "GPU%", "GPU MEM") if gpus else ()), [
        (r["job_id"], r["name"] or "-", str(r["task"]), r["node"], f"{r['cpu_rate']:.2f}", f"{r['cpu_request']:g}",
         _ratio(r["cpu_rate"], r["cpu_request"]), _mib(r["memory_working_set_bytes"]), _mib(r["memory_limit_bytes"]),
         _ratio(r["memory_working_set_bytes"], r["memory_limit_bytes"]), str(r["pids"]),
         _bits(r["net_tx_rate"]), _bits(r["net_request"])) + (_gpu_cells(r) if gpus else ()) for r in rows])


def _node_gpu_cells(row: dict[str, Any]) -> tuple[str, str]:
    if not row["gpu_capacity"]:
        return "-", "-"
    return f"{row['gpu_allocated']}/{row['gpu_capacity']}", _mib(row["gpu_memory_used_bytes"])


def _gpu_cells(row: dict[str, Any]) -> tuple[str, str, str]:
    """GPUS: the node's indices; GPU%: their mean utilization; '-' where none or unmeasured."""
    if not row["gpus"]:
        return "-", "-", "-"
    util, memory = row["gpu_util_percent"], row["gpu_memory_used_bytes"]
    return (",".join(map(str, row["gpus"])), "-" if util is None else f"{util:.0f}%",
            "-" if memory is None else _mib(memory))


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

