"""Conversions between protobuf messages and domain values. `_pb2` types stop here."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any

from tcluster.model import Job, JobSpec, JobState, Node, Task, TaskState, TaskUsage
from tcluster.resources import Resources
from tcluster.v1 import common_pb2, jobs_pb2

if TYPE_CHECKING:   # an annotation only: the queue statistics load YAML, which no client needs
    from tcluster.scheduler.queuestats import QueueRow

_TASK_STATE_TO_PB = {
    TaskState.PENDING: common_pb2.TASK_PENDING,
    TaskState.STARTING: common_pb2.TASK_STARTING,
    TaskState.RUNNING: common_pb2.TASK_RUNNING,
    TaskState.SUCCEEDED: common_pb2.TASK_SUCCEEDED,
    TaskState.FAILED: common_pb2.TASK_FAILED,
    TaskState.KILLED: common_pb2.TASK_KILLED,
    TaskState.LOST: common_pb2.TASK_LOST,
}
_TASK_STATE_FROM_PB = {v: k for k, v in _TASK_STATE_TO_PB.items()}
_JOB_STATE_TO_PB = {
    JobState.PENDING: jobs_pb2.JOB_PENDING,
    JobState.RUNNING: jobs_pb2.JOB_RUNNING,
    JobState.SUCCEEDED: jobs_pb2.JOB_SUCCEEDED,
    JobState.FAILED: jobs_pb2.JOB_FAILED,
    JobState.CANCELLED: jobs_pb2.JOB_CANCELLED,
}
_JOB_STATE_FROM_PB = {v: k for k, v in _JOB_STATE_TO_PB.items()}


def resources_to_pb(r: Resources) -> common_pb2.Resources:
    return common_pb2.Resources(cpu=r.cpu, memory=r.memory, other=dict(r.other))


def resources_from_pb(msg: common_pb2.Resources) -> Resources:
    other = msg.other
    if not other:        # the usual case, every heartbeat: what Resources.of makes of cpu and memory alone
        return Resources(float(msg.cpu), int(msg.memory))
    return Resources.of({"cpu": msg.cpu, "memory": msg.memory, **dict(other)})


def task_state_to_pb(state: TaskState) -> int:
    return _TASK_STATE_TO_PB[state]


def task_state_from_pb(value: int) -> TaskState:
    try:
        return _TASK_STATE_FROM_PB[value]
    except KeyError:
        raise ValueError(f"unknown task state {value}") from None


def job_state_to_pb(state: JobState) -> int:
    return _JOB_STATE_TO_PB[state]


def job_state_from_pb(value: int) -> JobState:
    try:
        return _JOB_STATE_FROM_PB[value]
    except KeyError:
        raise ValueError(f"unknown job state {value}") from None


def usage_to_pb(u: TaskUsage, task_id: str = "", attempt: int = 0) -> common_pb2.TaskUsage:
    msg = common_pb2.TaskUsage(
        task_id=task_id, attempt=attempt, cpu_seconds=u.cpu_seconds, cpu_rate=u.cpu_rate,
        memory_bytes=u.memory_bytes, memory_peak_bytes=u.memory_peak_bytes,
        memory_anon_bytes=u.memory_anon_bytes, memory_file_bytes=u.memory_file_bytes,
        pids=u.pids, sampled_at=u.sampled_at, **{name: getattr(u, name) for name in _USAGE_DETAIL},
    )
    if u.memory_inactive_file_bytes >= 0:        # unset means "not read" (-1 in the domain)
        msg.memory_inactive_file_bytes = u.memory_inactive_file_bytes
    return msg


# TaskUsage fields the proto spells the same way (the node runtime's detail).
_USAGE_DETAIL = (
    "cpu_user_seconds", "cpu_system_seconds", "cpu_user_rate", "cpu_system_rate", "cpu_throttled_seconds",
    "cpu_throttled_periods", "memory_swap_bytes", "io_read_bytes", "io_write_bytes", "oom_kills", "pids_max_hits",
    "net_tx_bytes", "net_rx_bytes", "net_tx_rate", "net_rx_rate",
)


_USAGE_FIELDS = tuple(f.name for f in fields(TaskUsage))
_new_usage = object.__new__


def usage_from_pb(msg: common_pb2.TaskUsage) -> TaskUsage:
    """Hot: one per task per heartbeat. Builds the frozen value without its __init__ (which
    sets 24 fields one by one through object.__setattr__); every field is the proto's own."""
    usage = _new_usage(TaskUsage)
    values = {name: getattr(msg, name) for name in _USAGE_FIELDS}
    if not values["memory_inactive_file_bytes"] and not msg.HasField("memory_inactive_file_bytes"):
        values["memory_inactive_file_bytes"] = -1     # an agent that does not read it
    usage.__dict__.update(values)
    return usage


def spec_to_pb(spec: JobSpec) -> jobs_pb2.JobSpec:
    return jobs_pb2.JobSpec(
        name=spec.name, queue=spec.queue, tasks=spec.tasks,
        resources=resources_to_pb(spec.resources), command=list(spec.command),
        env=dict(spec.env), user=spec.user, workdir=spec.workdir, labels=dict(spec.labels),
        constraints=list(spec.constraints), cpu_limit=spec.cpu_limit, swap=spec.swap, pids_max=spec.pids_max,
        weight=spec.weight, retries=spec.retries, log_max_bytes=spec.log_max_bytes, image=spec.image,
        network=spec.network, net_limit=spec.net_limit, owner=spec.owner,
        request_id=spec.request_id,
    )


def spec_from_pb(msg: jobs_pb2.JobSpec) -> JobSpec:
    """Unset fields take the domain defaults; validation is the caller's job."""
    return JobSpec(
        command=tuple(msg.command), resources=resources_from_pb(msg.resources),
        name=msg.name, queue=msg.queue or "default", tasks=msg.tasks or 1,
        env=tuple(sorted(msg.env.items())), user=msg.user, workdir=msg.workdir,
        labels=tuple(sorted(msg.labels.items())), constraints=tuple(msg.constraints),
        cpu_limit=msg.cpu_limit, swap=msg.swap, pids_max=msg.pids_max,
        weight=msg.weight or 1.0,   # 0 is proto3 for unset
        retries=msg.retries, log_max_bytes=msg.log_max_bytes, image=msg.image, network=msg.network,
        net_limit=msg.net_limit, owner=msg.owner, request_id=msg.request_id,
    )


def task_to_pb(t: Task) -> jobs_pb2.Task:
    return jobs_pb2.Task(
        index=t.index, id=t.id, state=task_state_to_pb(t.state), node=t.node, attempt=t.attempt,
        has_exit_code=t.exit_code is not None, exit_code=t.exit_code or 0, signal=t.signal,
        reason=t.reason, started_at=t.started_at, finished_at=t.finished_at,
        usage=usage_to_pb(t.usage, t.id, t.attempt), failures=t.failures,
    )


def task_from_pb(job_id: str, msg: jobs_pb2.Task) -> Task:
    return Task(
        job_id=job_id, index=msg.index, state=task_state_from_pb(msg.state), node=msg.node,
        attempt=msg.attempt, exit_code=msg.exit_code if msg.has_exit_code else None,
        signal=msg.signal, reason=msg.reason, started_at=msg.started_at,
        finished_at=msg.finished_at, usage=usage_from_pb(msg.usage), failures=msg.failures,
    )


def job_to_pb(job: Job, tasks: list[Task], dominant_share: float = 0.0, lotes_class: int | None = None) -> jobs_pb2.Job:
    """lotes_class: the LoTES class of the job's tasks (one request, one class), if any."""
    msg = jobs_pb2.Job(
        id=job.id, spec=spec_to_pb(job.spec), state=job_state_to_pb(job.state),
        submitted_at=job.submitted_at, finished_at=job.finished_at,
        pending_reason=job.pending_reason, tasks=[task_to_pb(t) for t in tasks],
        dominant_share=dominant_share,
    )
    if lotes_class is not None:
        for task in msg.tasks:
            task.lotes_class = lotes_class
    return msg


def node_to_pb(node: Node, free: Resources, task_ids: list[str], lotes: Any = None) -> jobs_pb2.Node:
    """lotes: a master.lotes_live.NodeLotesView (config, target, actual, counted) or None."""
    msg = jobs_pb2.Node(
        name=node.name, state=node.state.value, capacity=resources_to_pb(node.capacity),
        free=resources_to_pb(free), labels=dict(node.labels), tasks=task_ids,
        last_seen=node.last_seen, reserved=resources_to_pb(node.reserved),
    )
    if lotes is not None:
        msg.lotes.CopyFrom(jobs_pb2.NodeLotes(config=lotes.config, target=lotes.target, actual=lotes.actual,
                                              counted=lotes.counted))
    return msg


def lotes_status_to_pb(status: Any) -> jobs_pb2.LotesStatus:
    """status: a master.lotes_live.LotesStatusView."""
    return jobs_pb2.LotesStatus(
        fallback=status.fallback, last_solve=status.last_solve, solve_seconds=status.solve_seconds,
        solves=status.solves, solved_at=status.solved_at, classes=list(status.classes),
        classes_source=status.classes_source,
    )


def queue_to_pb(row: QueueRow) -> jobs_pb2.Queue:
    return jobs_pb2.Queue(
        path=row.path, name=row.name, parent=row.parent, depth=row.depth, leaf=row.leaf, weight=row.weight,
        guaranteed_share=row.guaranteed_share, dominant_share=row.dominant_share,
        allocated=resources_to_pb(row.allocated), running_tasks=row.running_tasks,
        pending_tasks=row.pending_tasks, running_jobs=row.running_jobs, pending_jobs=row.pending_jobs,
    )
