"""Conversions between protobuf messages and domain values. `_pb2` types stop here."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Sequence

from tcluster.domain.gpuusage import GpuSample
from tcluster.domain.launch import Launch
from tcluster.domain.model import Job, JobSpec, Node, NodeState, Task, TaskUsage
from tcluster.domain.nodeorders import OPERATOR_STATES, NodeOps
from tcluster.views.queuerow import QueueRow
from tcluster.domain.resources import Resources
from tcluster.domain.specfields import SPEC_FIELDS, Carrier
from tcluster.domain.taskusage import NOT_SENT, OPTIONAL, RATES
from tcluster.v1 import agent_pb2, common_pb2, jobs_pb2
from tcluster.wire.basics import (  # noqa: F401  (the codecs' one import site for the rest of the tree: re-exported)
    job_state_from_pb as job_state_from_pb, job_state_to_pb as job_state_to_pb,
    resources_from_pb as resources_from_pb, resources_to_pb as resources_to_pb,
    task_state_from_pb as task_state_from_pb, task_state_to_pb as task_state_to_pb,
)

_FIELDS = tuple(f.name for f in fields(TaskUsage))       # each on the wire under its own name
_PLAIN = tuple(name for name in _FIELDS if name not in OPTIONAL and name not in RATES)
_NO_RATES = {name: float(NOT_SENT) for name in RATES}
_new_usage = object.__new__
_OPERATOR_STATE_NAMES = frozenset(s.value for s in OPERATOR_STATES)


def usage_to_pb(u: TaskUsage, task_id: str = "", attempt: int = 0) -> common_pb2.TaskUsage:
    msg = common_pb2.TaskUsage(task_id=task_id, attempt=attempt, **{name: getattr(u, name) for name in _PLAIN})
    for name in OPTIONAL:
        value = getattr(u, name)
        if value >= 0:            # unset means "not read" (NOT_SENT in the domain)
            setattr(msg, name, value)
    if u.rates_derived:           # the rates go together, or not at all (an older agent's sample)
        msg.rates_derived = True
        for name in RATES:
            setattr(msg, name, getattr(u, name))
    return msg


def gpu_usage_to_pb(s: GpuSample) -> common_pb2.GpuUsage:
    return common_pb2.GpuUsage(task_id=s.task_id, attempt=s.attempt, index=s.index, util_percent=s.util_percent,
                               memory_used_bytes=s.memory_used_bytes, memory_total_bytes=s.memory_total_bytes)


def gpu_usage_from_pb(msg: common_pb2.GpuUsage) -> GpuSample:
    return GpuSample(msg.task_id, msg.attempt, msg.index, msg.util_percent, msg.memory_used_bytes,
                     msg.memory_total_bytes)


def usage_from_pb(msg: common_pb2.TaskUsage) -> TaskUsage:
    """Hot: one per task per heartbeat. Builds the frozen value without its __init__ (which
    sets every field one by one through object.__setattr__); every field is the proto's own."""
    usage = _new_usage(TaskUsage)
    values = {name: getattr(msg, name) for name in _FIELDS}
    for name in OPTIONAL:
        if not values[name] and not msg.HasField(name):
            values[name] = NOT_SENT     # an agent that does not read it
    if not msg.rates_derived:           # an agent of the previous version
        values.update(_NO_RATES)
    usage.__dict__.update(values)
    return usage


_TO_PB = Carrier(resources=resources_to_pb, pairs=dict, sequence=list)
_FROM_PB = Carrier(resources=resources_from_pb, pairs=lambda pairs: tuple(sorted(pairs.items())), sequence=tuple)


def spec_to_pb(spec: JobSpec) -> jobs_pb2.JobSpec:
    return jobs_pb2.JobSpec(**{entry.proto: _TO_PB.carry(entry.kind, getattr(spec, entry.name)) for entry in SPEC_FIELDS})


def spec_from_pb(msg: jobs_pb2.JobSpec) -> JobSpec:
    """Unset fields take the domain defaults; validation is the caller's job."""
    values = ((entry, getattr(msg, entry.proto)) for entry in SPEC_FIELDS)
    # proto3's zero is "unset": a scalar left so takes the domain default (queue "default", weight 1).
    return JobSpec(**{entry.name: _FROM_PB.carry(entry.kind, value) for entry, value in values
                      if value or not entry.kind.is_scalar})


def task_to_pb(t: Task, gpu_usage: tuple[GpuSample, ...] = ()) -> jobs_pb2.Task:
    return jobs_pb2.Task(
        index=t.index, id=t.id, state=task_state_to_pb(t.state), node=t.node, attempt=t.attempt,
        has_exit_code=t.exit_code is not None, exit_code=t.exit_code or 0, signal=t.signal,
        reason=t.reason, started_at=t.started_at, finished_at=t.finished_at,
        usage=usage_to_pb(t.usage, t.id, t.attempt), failures=t.failures, preemptions=t.preemptions,
        gpus=list(t.gpus), gpu_usage=[gpu_usage_to_pb(s) for s in gpu_usage],
    )


def job_to_pb(job: Job, tasks: list[Task], dominant_share: float = 0.0, lotes_class: int | None = None,
              gpu_usage: Callable[[Task], tuple[GpuSample, ...]] | None = None) -> jobs_pb2.Job:
    """lotes_class: the LoTES class of the job's tasks (one request, one class), if any;
    gpu_usage: the last GPU samples of a task (the master's GpuBoard), where known."""
    msg = jobs_pb2.Job(
        id=job.id, spec=spec_to_pb(job.spec), state=job_state_to_pb(job.state),
        submitted_at=job.submitted_at, finished_at=job.finished_at,
        pending_reason=job.pending_reason,
        tasks=[task_to_pb(t, gpu_usage(t) if gpu_usage is not None and t.gpus else ()) for t in tasks],
        dominant_share=dominant_share, unplaced=job.unplaced.text(), skipped=job.skipped.text(),
        throttle=job.throttle, reason=job.reason, released=job.released, held_by=job.held_by,
    )
    if lotes_class is not None:
        for task in msg.tasks:
            task.lotes_class = lotes_class
    return msg


def node_to_pb(node: Node, free: Resources, task_ids: list[str], lotes: Any = None,
               blockers: Sequence[Any] = ()) -> jobs_pb2.Node:
    """lotes: a master.lotes_live.NodeLotesView (config, target, actual, counted) or None;
    blockers: master.nodeadmin.Blocker values (a draining node's tasks and why)."""
    msg = jobs_pb2.Node(
        name=node.name, state=node.state.value, capacity=resources_to_pb(node.capacity),
        free=resources_to_pb(free), labels=dict(node.labels), tasks=task_ids,
        last_seen=node.last_seen, reserved=resources_to_pb(node.reserved), ops=node_ops_to_pb(node.ops),
        blockers=[jobs_pb2.NodeBlocker(task_id=b.task_id, job_id=b.job_id, job_name=b.job_name, state=b.state,
                                       why=b.why) for b in blockers],
    )
    if lotes is not None:
        msg.lotes.CopyFrom(jobs_pb2.NodeLotes(config=lotes.config, target=lotes.target, actual=lotes.actual,
                                              counted=lotes.counted))
    return msg


def node_ops_to_pb(ops: NodeOps) -> jobs_pb2.NodeOps:
    return jobs_pb2.NodeOps(state=ops.state.value, by=ops.by, at=ops.at, reason=ops.reason,
                            drain_deadline=ops.deadline, drain_since=ops.since, maint_start=ops.maint_start,
                            maint_end=ops.maint_end, maint_by=ops.maint_by, maint_reason=ops.maint_reason)


def node_ops_from_pb(msg: jobs_pb2.NodeOps) -> NodeOps:
    """An unknown state (a newer master's) reads as CORDONED, as the stores read it."""
    state = NodeState(msg.state) if msg.state in _OPERATOR_STATE_NAMES else NodeState.CORDONED
    return NodeOps(state if msg.state else NodeState.READY, msg.by, msg.at, msg.reason, msg.drain_deadline,
                   msg.drain_since, msg.maint_start, msg.maint_end, msg.maint_by, msg.maint_reason)


def lotes_status_to_pb(status: Any) -> jobs_pb2.LotesStatus:
    """status: a master.lotes_live.LotesStatusView."""
    return jobs_pb2.LotesStatus(
        fallback=status.fallback, last_solve=status.last_solve, solve_seconds=status.solve_seconds,
        solves=status.solves, solved_at=status.solved_at, classes=list(status.classes),
        classes_source=status.classes_source,
    )


def launch_to_pb(launch: Launch) -> agent_pb2.LaunchTask:
    assert launch.spec is not None, "a launch sent to an agent carries its spec"
    msg = agent_pb2.LaunchTask(task_id=launch.task_id, attempt=launch.attempt, job_id=launch.job_id,
                               index=launch.index, spec=spec_to_pb(launch.spec), preemptions=launch.preemptions)
    if launch.lotes_class is not None:
        msg.lotes_class = launch.lotes_class
    return msg


def launch_from_pb(msg: agent_pb2.LaunchTask) -> Launch:
    return Launch(task_id=msg.task_id, attempt=msg.attempt, job_id=msg.job_id, index=msg.index,
                  spec=spec_from_pb(msg.spec), lotes_class=msg.lotes_class if msg.HasField("lotes_class") else None,
                  preemptions=msg.preemptions)


def queue_to_pb(row: QueueRow) -> jobs_pb2.Queue:
    return jobs_pb2.Queue(
        path=row.path, name=row.name, parent=row.parent, depth=row.depth, leaf=row.leaf, weight=row.weight,
        guaranteed_share=row.guaranteed_share, dominant_share=row.dominant_share,
        allocated=resources_to_pb(row.allocated), running_tasks=row.running_tasks,
        pending_tasks=row.pending_tasks, running_jobs=row.running_jobs, pending_jobs=row.pending_jobs,
        user=row.user, decayed_usage_s=row.decayed_usage_s,
    )


def queue_from_pb(msg: jobs_pb2.Queue) -> QueueRow:
    return QueueRow(
        path=msg.path, name=msg.name, parent=msg.parent, depth=msg.depth, leaf=msg.leaf, weight=msg.weight,
        guaranteed_share=msg.guaranteed_share, dominant_share=msg.dominant_share,
        allocated=resources_from_pb(msg.allocated), running_tasks=msg.running_tasks,
        pending_tasks=msg.pending_tasks, running_jobs=msg.running_jobs, pending_jobs=msg.pending_jobs,
        user=msg.user, decayed_usage_s=msg.decayed_usage_s,
    )
