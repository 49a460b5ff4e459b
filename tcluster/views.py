"""The views every front end shares: plain JSON-ready dicts (the `-o json` contract scripts
depend on, and the dashboard's JSON API) and aligned text tables.

Field names here are a public interface: add fields freely, never rename one.
Enum values are their names without the proto prefix (JOB_RUNNING -> "RUNNING");
timestamps are RFC 3339 UTC strings with milliseconds, or null when unset (0).
"""

from __future__ import annotations

import signal
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, Sequence

from tcluster.v1 import common_pb2, jobs_pb2
from tcluster.taskusage import FIELD_TYPES, USAGE_FIELDS, TaskUsage
from tcluster.wire import job_state_from_pb, resources_from_pb, resources_to_pb, task_state_from_pb, usage_from_pb

JsonDict = dict[str, Any]


def job_state_name(value: int) -> str:
    try:
        return job_state_from_pb(value).value
    except ValueError:
        # An older/newer master may send a state this client does not know.
        return "UNSPECIFIED" if value == 0 else f"UNKNOWN({value})"


def task_state_name(value: int) -> str:
    try:
        return task_state_from_pb(value).value
    except ValueError:
        return "UNSPECIFIED" if value == 0 else f"UNKNOWN({value})"


def signal_name(number: int) -> str | None:
    """9 -> 'SIGKILL'; None for 0 (no signal)."""
    if not number:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def timestamp(seconds: float) -> str | None:
    """Unix seconds -> '2026-11-22T10:00:00.123Z'; 0 (proto 'unset') -> None."""
    if not seconds:
        return None
    whole, ms = divmod(round(seconds * 1000), 1000)
    return f"{_second(whole)}.{ms:03d}Z"


@lru_cache(maxsize=64)
def _second(whole: int) -> str:
    """Hot on the dashboard (a job page of 1,000 tasks every 2 s): most share a second."""
    return f"{datetime.fromtimestamp(whole, tz=timezone.utc):%Y-%m-%dT%H:%M:%S}"


def resources_json(msg: common_pb2.Resources) -> JsonDict:
    # memory is bytes: an int, so scripts can compare without float noise.
    return {"cpu": msg.cpu, "memory": int(msg.memory), **dict(sorted(msg.other.items()))}


_JSON_FIELDS = tuple((f.name, FIELD_TYPES[f.name]) for f in USAGE_FIELDS if f.json)


def usage_json(usage: TaskUsage) -> JsonDict:
    """The fields the table marks `json`, in its order, each as its declared type (an int
    given where a float is declared prints as a float, as protobuf would)."""
    doc: JsonDict = {name: kind(getattr(usage, name)) for name, kind in _JSON_FIELDS}
    doc["sampled_at"] = timestamp(usage.sampled_at)
    return doc


def task_json(msg: jobs_pb2.Task) -> JsonDict:
    return {
        "index": msg.index,
        "id": msg.id,
        "state": task_state_name(msg.state),
        "node": msg.node,
        "attempt": msg.attempt,
        "failures": msg.failures,
        "exit_code": msg.exit_code if msg.has_exit_code else None,
        "signal": msg.signal,
        "signal_name": signal_name(msg.signal),
        "reason": msg.reason,
        "started_at": timestamp(msg.started_at),
        "finished_at": timestamp(msg.finished_at),
        "usage": usage_json(usage_from_pb(msg.usage)),
        "lotes_class": msg.lotes_class if msg.HasField("lotes_class") else None,
    }


def tasks_total(msg: jobs_pb2.Job) -> int:
    return msg.spec.tasks or len(msg.tasks)


def job_json(msg: jobs_pb2.Job) -> JsonDict:
    spec = msg.spec
    return {
        "id": msg.id,
        "name": spec.name,
        "queue": spec.queue,
        "state": job_state_name(msg.state),
        "submitted_at": timestamp(msg.submitted_at),
        "finished_at": timestamp(msg.finished_at),
        "resources": resources_json(spec.resources),
        "command": list(spec.command),
        "env": dict(sorted(spec.env.items())),
        "user": spec.user,
        "owner": spec.owner,
        "request_id": spec.request_id,
        "workdir": spec.workdir,
        "labels": dict(sorted(spec.labels.items())),
        "constraints": list(spec.constraints),
        "weight": spec.weight or 1.0,
        "dominant_share": msg.dominant_share,
        "cpu_limit": spec.cpu_limit,
        "swap": spec.swap,
        "pids_max": spec.pids_max,
        "retries": spec.retries,
        "image": spec.image,
        "network": spec.network,
        "net_limit": spec.net_limit,
        "log_max_bytes": spec.log_max_bytes,
        "tasks_total": tasks_total(msg),
        "pending_reason": msg.pending_reason,
        "tasks": [task_json(task) for task in msg.tasks],
    }


def used_resources(msg: jobs_pb2.Node) -> common_pb2.Resources:
    """capacity - free, per kind, never below zero (free may briefly exceed capacity)."""
    used = resources_from_pb(msg.capacity) - resources_from_pb(msg.free)
    return resources_to_pb(used.clamp_nonnegative())


def mix_json(mix: Any) -> JsonDict:
    """A LoTES class mix {class: count} with string keys, in class order."""
    return {str(k): int(n) for k, n in sorted(mix.items()) if n}


def lotes_json(msg: jobs_pb2.NodeLotes, status: jobs_pb2.LotesStatus | None) -> JsonDict:
    return {
        "config": msg.config or None,
        "target": mix_json(msg.target),
        "actual": mix_json(msg.actual),
        "counted": mix_json(msg.counted),
        "fallback": (status.fallback or None) if status is not None else None,
        "classes": list(status.classes) if status is not None else [],
    }


def node_json(msg: jobs_pb2.Node, lotes: jobs_pb2.LotesStatus | None = None) -> JsonDict:
    """`lotes` (the plan status) adds a "lotes" object: the node's bin and class mixes."""
    body = _node_json(msg)
    if msg.HasField("lotes") or lotes is not None:
        body["lotes"] = lotes_json(msg.lotes, lotes)
    return body


def _node_json(msg: jobs_pb2.Node) -> JsonDict:
    return {
        "name": msg.name,
        "state": msg.state,
        "capacity": resources_json(msg.capacity),
        "free": resources_json(msg.free),
        "used": resources_json(used_resources(msg)),
        "reserved": resources_json(msg.reserved),
        "labels": dict(sorted(msg.labels.items())),
        "tasks": list(msg.tasks),
        "last_seen": timestamp(msg.last_seen),
    }


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart; the last column is not padded."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row)]
    lines = []
    for row in [list(headers), *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def queue_json(q: jobs_pb2.Queue) -> dict[str, Any]:
    return {
        "path": q.path, "name": q.name, "parent": q.parent, "depth": q.depth, "leaf": q.leaf,
        "weight": q.weight, "guaranteed_share": q.guaranteed_share, "dominant_share": q.dominant_share,
        "allocated": resources_json(q.allocated),
        "running_tasks": q.running_tasks, "pending_tasks": q.pending_tasks,
        "running_jobs": q.running_jobs, "pending_jobs": q.pending_jobs,
    }


def queues_json(reply: jobs_pb2.ListQueuesResponse) -> dict[str, Any]:
    return {
        "fairness": reply.fairness, "source": reply.source, "capacity": resources_json(reply.capacity),
        "queues": [queue_json(q) for q in reply.queues if q.path],
    }
