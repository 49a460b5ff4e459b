"""The views every front end shares: plain JSON-ready dicts (the `-o json` contract scripts
depend on, and the dashboard's JSON API) and aligned text tables. Built from domain values:
the dashboard passes its own, `tcl` the reply's (cli/replies.py); the job's spec part reads
the field table (tcluster/domain/specfields.py).

Field names here are a public interface: add fields freely, never rename one.
Enum values are their names without the proto prefix (JOB_RUNNING -> "RUNNING");
timestamps are RFC 3339 UTC strings with milliseconds, or null when unset (0).
"""

from __future__ import annotations

from typing import Any, Sequence

from tcluster.views.formats import signal_name, timestamp
from tcluster.domain.gpuusage import GpuSample, gpu_json
from tcluster.domain.model import Job, Node, Task
from tcluster.domain.nodeorders import NodeOps
from tcluster.views.queuerow import QueueRow
from tcluster.domain.resources import Resources
from tcluster.domain.specfields import SPEC_FIELDS, Carrier, Kind, SpecField
from tcluster.domain.taskusage import FIELD_TYPES, USAGE_FIELDS, TaskUsage

JsonDict = dict[str, Any]
# Where the job's own keys sit among its spec's in job JSON: the key order `-o json` has
# always printed (the spec's keys follow the field table's order).
_JOB_KEYS_AFTER = {"queue": ("state", "submitted_at", "finished_at"), "weight": ("dominant_share",)}
# Kinds held as doubles in the proto: JSON shows them as floats (2.0, never 2).
_FLOAT_KINDS = (Kind.WEIGHT, Kind.CORES, Kind.RATE, Kind.DURATION, Kind.TIME_LIMIT)


def resources_json(r: Resources) -> JsonDict:
    # memory is bytes: an int, so scripts can compare without float noise.
    return {"cpu": float(r.cpu), "memory": int(r.memory), **{kind: float(v) for kind, v in sorted(r.other)}}


_JSON_FIELDS = tuple((f.name, FIELD_TYPES[f.name]) for f in USAGE_FIELDS if f.json)


def usage_json(usage: TaskUsage) -> JsonDict:
    """The fields the table marks `json`, in its order, each as its declared type (an int
    given where a float is declared prints as a float, as protobuf would)."""
    doc: JsonDict = {name: kind(getattr(usage, name)) for name, kind in _JSON_FIELDS}
    doc["sampled_at"] = timestamp(usage.sampled_at)
    return doc


def task_json(task: Task, lotes_class: int | None = None, gpu_usage: tuple[GpuSample, ...] = ()) -> JsonDict:
    """lotes_class: the LoTES class of the task's job, where the master reports one;
    gpu_usage: its GPUs' last samples (the key is there only where NVML reported some)."""
    doc: JsonDict = {
        "index": task.index,
        "id": task.id,
        "state": task.state.value,
        "node": task.node,
        "attempt": task.attempt,
        "failures": task.failures,
        "preemptions": task.preemptions,
        "exit_code": task.exit_code,
        "signal": task.signal,
        "signal_name": signal_name(task.signal),
        "reason": task.reason,
        "started_at": timestamp(task.started_at),
        "finished_at": timestamp(task.finished_at),
        "usage": usage_json(task.usage),
        "lotes_class": lotes_class,
        "gpus": list(task.gpus),       # the node's GPU indices bound to the attempt
    }
    if gpu_usage:
        doc["gpu_usage"] = gpu_json(gpu_usage)
    return doc


_JSON = Carrier(resources=resources_json, pairs=lambda pairs: dict(sorted(pairs)), sequence=list)


def spec_value_json(entry: SpecField, value: Any) -> Any:
    return float(value) if entry.kind in _FLOAT_KINDS else _JSON.carry(entry.kind, value)


def job_json(job: Job, tasks: list[JsonDict], dominant_share: float = 0.0) -> JsonDict:
    """tasks: the task documents (task_json), in index order."""
    own = {"state": job.state.value, "submitted_at": timestamp(job.submitted_at),
           "finished_at": timestamp(job.finished_at), "dominant_share": dominant_share}
    doc: JsonDict = {"id": job.id}
    for entry in SPEC_FIELDS:
        if entry.json is not None:
            doc[entry.json] = spec_value_json(entry, getattr(job.spec, entry.name))
        for key in _JOB_KEYS_AFTER.get(entry.name, ()):
            doc[key] = own[key]
    doc.update(tasks_total=job.spec.tasks, pending_reason=job.pending_reason, reason=job.reason,
               held_by=job.held_by)    # `tcl hold`: who holds its pending tasks back; "" = not held
    if job.spec.array:        # an array's indexes without a task yet, and its live throttle
        doc.update(pending_indexes=job.unplaced.text(), skipped_indexes=job.skipped.text(), throttle=job.throttle)
    doc["tasks"] = tasks
    return doc


def node_json(node: Node, free: Resources, task_ids: list[str], blockers: Sequence[Any] = ()) -> JsonDict:
    return {
        "name": node.name,
        "state": node.state.value,
        "capacity": resources_json(node.capacity),
        "free": resources_json(free),
        # capacity - free, per kind, never below zero (free may briefly exceed capacity)
        "used": resources_json((node.capacity - free).clamp_nonnegative()),
        "reserved": resources_json(node.reserved),
        "labels": dict(sorted(node.labels)),
        "tasks": list(task_ids),
        "last_seen": timestamp(node.last_seen),
        "ops": node_ops_json(node.ops),
        "blockers": blockers_json(blockers),
    }


def node_ops_json(ops: NodeOps) -> JsonDict:
    """What an operator asked (README "Node operations"), with who, when and why; the
    node's `state` is DOWN while its agent is away, whatever was asked."""
    window = None
    if ops.has_window:
        window = {"start": timestamp(ops.maint_start), "end": timestamp(ops.maint_end), "by": ops.maint_by,
                  "reason": ops.maint_reason}
    return {"state": ops.state.value, "by": ops.by, "at": timestamp(ops.at), "reason": ops.reason,
            "drain_deadline": timestamp(ops.deadline), "drain_since": timestamp(ops.since), "maintenance": window}


def blockers_json(blockers: Sequence[Any]) -> list[JsonDict]:
    """A draining node's tasks and why the drain waits for each (master.nodeadmin.Blocker or its reply)."""
    return [{"task": b.task_id, "job_id": b.job_id, "job_name": b.job_name, "state": b.state, "why": b.why}
            for b in blockers]


def queue_json(q: QueueRow) -> JsonDict:
    return {
        "path": q.path, "name": q.name, "parent": q.parent, "depth": q.depth, "leaf": q.leaf,
        "weight": float(q.weight), "guaranteed_share": float(q.guaranteed_share),
        "dominant_share": float(q.dominant_share), "allocated": resources_json(q.allocated),
        "running_tasks": q.running_tasks, "pending_tasks": q.pending_tasks,
        "running_jobs": q.running_jobs, "pending_jobs": q.pending_jobs,
        "user": q.user, "decayed_usage_s": float(q.decayed_usage_s),
    }


def queues_json(rows: Sequence[QueueRow], fairness: str, source: str, capacity: Resources) -> JsonDict:
    """`tcl queues -o json` and /api/v1/queues: the queue tree's rows, the root (no path) left out."""
    return {
        "fairness": fairness, "source": source, "capacity": resources_json(capacity),
        "queues": [queue_json(q) for q in rows if q.path],
    }
