"""The master's replies (protobuf) for `tcl`: as domain values through the JSON views the
dashboard uses too (tcluster/views/render.py), and the state names the tables print.

A state this client does not know (a newer master's) is shown by its number, never an
error: the JSON keeps the reply's own state name wherever the domain value could not."""

from __future__ import annotations

from typing import Any

from tcluster.cli.names import job_state_name, task_state_name, tasks_total
from tcluster.domain.model import Job, JobState, Node, NodeState, Task, TaskState
from tcluster.v1 import jobs_pb2
from tcluster.views.render import JsonDict, job_json, node_json, task_json
from tcluster.domain.arrays import index_set_from_text
from tcluster.wire.protobuf import gpu_usage_from_pb, node_ops_from_pb, resources_from_pb, spec_from_pb, usage_from_pb


def reply_task_json(job_id: str, msg: jobs_pb2.Task) -> JsonDict:
    state = _known(TaskState, task_state_name(msg.state), TaskState.PENDING)
    task = Task(job_id=job_id, index=msg.index, state=state, node=msg.node, attempt=msg.attempt,
                exit_code=msg.exit_code if msg.has_exit_code else None, signal=msg.signal, reason=msg.reason,
                started_at=msg.started_at, finished_at=msg.finished_at, usage=usage_from_pb(msg.usage),
                failures=msg.failures, preemptions=msg.preemptions, gpus=tuple(msg.gpus))
    doc = task_json(task, msg.lotes_class if msg.HasField("lotes_class") else None,
                    tuple(gpu_usage_from_pb(g) for g in msg.gpu_usage))
    doc.update(id=msg.id, state=task_state_name(msg.state))
    return doc


def reply_job_json(msg: jobs_pb2.Job) -> JsonDict:
    job = Job(id=msg.id, spec=spec_from_pb(msg.spec), submitted_at=msg.submitted_at,
              state=_known(JobState, job_state_name(msg.state), JobState.PENDING), finished_at=msg.finished_at,
              pending_reason=msg.pending_reason, unplaced=index_set_from_text(msg.unplaced),
              skipped=index_set_from_text(msg.skipped), throttle=msg.throttle, reason=msg.reason,
              released=msg.released, held_by=msg.held_by)
    doc = job_json(job, [reply_task_json(msg.id, t) for t in msg.tasks], dominant_share=msg.dominant_share)
    doc.update(state=job_state_name(msg.state), tasks_total=tasks_total(msg))
    if msg.tasks_compact:       # only some rows: every row's index by state (master/edge/taskpages.py)
        doc.update(tasks_compact=True, task_rows=msg.task_rows, compact_note=msg.compact_note,
                   task_ranges={task_state_name(r.state): {"indexes": r.indexes, "count": r.count}
                                for r in msg.task_ranges})
    return doc


def reply_node_json(msg: jobs_pb2.Node, lotes: jobs_pb2.LotesStatus | None = None) -> JsonDict:
    """`lotes` (the plan status) adds a "lotes" object: the node's bin and class mixes."""
    node = Node(name=msg.name, capacity=resources_from_pb(msg.capacity), reserved=resources_from_pb(msg.reserved),
                labels=tuple(sorted(msg.labels.items())), state=_known(NodeState, msg.state, NodeState.READY),
                last_seen=msg.last_seen, ops=node_ops_from_pb(msg.ops))
    doc = node_json(node, resources_from_pb(msg.free), list(msg.tasks), msg.blockers)
    doc["state"] = msg.state
    if msg.HasField("lotes") or lotes is not None:
        doc["lotes"] = lotes_json(msg.lotes, lotes)
    return doc


def _known(enum: Any, name: str, placeholder: Any) -> Any:
    """The domain value of a state name; a name it lacks gets a placeholder that the caller
    overwrites in the JSON with the reply's own name."""
    return enum(name) if name in enum.__members__ else placeholder


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
