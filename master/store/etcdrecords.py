"""The one etcd codec of each record the master keeps: compact JSON arrays, read back by
the store (master/store/etcd.py) and written by its plan (master/store/etcdplan.py)."""

from __future__ import annotations

import json

from tcluster.wire.codec import job_extra_to_json, resources_from_dict, resources_to_dict, usage_from_json, usage_to_json
from tcluster.master.core.events import KillIntent
from tcluster.domain.model import Job, Node, NodeState, Task, TaskState
from tcluster.domain.taskusage import NO_USAGE
from tcluster.domain.nodeorders import READY_OPS, ops_from_json, ops_to_json


def _dumps(data: object) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def task_key(job_id: str, index: int) -> str:
    return f"state/tasks/{job_id}/{index:06d}"


def job_record(job: Job) -> bytes:
    extra = job_extra_to_json(job)      # only when set: an older master reads the first four
    return _dumps([job.state.value, job.submitted_at, job.finished_at, int(job.cancelled), *([extra] if extra else [])])


def task_record(t: Task) -> bytes:
    usage = "" if t.usage is NO_USAGE or t.usage == NO_USAGE else usage_to_json(t.usage)
    return _dumps([t.state.value, t.node, t.attempt, t.exit_code, t.signal, t.reason, t.started_at, t.finished_at,
                   usage, t.failures, t.preemptions, list(t.gpus)])


def node_record(n: Node) -> bytes:
    return _dumps([resources_to_dict(n.capacity), resources_to_dict(n.reserved), dict(n.labels), n.state.value,
                   n.last_seen, n.runtime, ops_to_json(n.ops)])


def kill_record(k: KillIntent) -> bytes:
    return _dumps([k.node, k.reason, int(k.mode), k.by_job])


def read_task(job_id: str, index: int, raw: bytes) -> Task:
    r = json.loads(raw)
    return Task(job_id=job_id, index=index, state=TaskState(r[0]), node=r[1], attempt=r[2], exit_code=r[3],
                signal=r[4], reason=r[5], started_at=r[6], finished_at=r[7],
                usage=usage_from_json(r[8]) if r[8] else NO_USAGE, failures=r[9],
                preemptions=r[10] if len(r) > 10 else 0,
                gpus=tuple(int(i) for i in r[11]) if len(r) > 11 else ())


def read_node(name: str, raw: bytes) -> Node:
    r = json.loads(raw)
    return Node(name=name, capacity=resources_from_dict(r[0]), reserved=resources_from_dict(r[1]),
                labels=tuple(sorted(r[2].items())), state=NodeState(r[3]), last_seen=r[4], runtime=r[5],
                ops=ops_from_json(r[6]) if len(r) > 6 else READY_OPS)    # records before node operations: none
