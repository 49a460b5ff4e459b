"""The live master's side of queue quotas (scheduler/quotas.py, scheduler/capbook.py):
what runs per leaf queue and user, for the round's CapBook, and the submit's
`max_pending_per_user` check. Read-only on the state; the checks themselves are pure."""

from __future__ import annotations

from tcluster.domain.arrays import parse_array
from tcluster.domain.model import JobSpec, TaskState
from tcluster.master.core.state import MasterState
from tcluster.scheduler.capbook import Holding
from tcluster.scheduler.queues import QueueTree
from tcluster.scheduler.quotas import job_user, pending_cap_error


def running_holdings(state: MasterState) -> list[Holding]:
    """One Holding per job with tasks holding resources (STARTING, RUNNING; a task being
    preempted still holds its room until it is gone)."""
    held = []
    for job_id, counts in state.counts.items():
        running = counts[TaskState.STARTING] + counts[TaskState.RUNNING]
        if running:
            spec = state.jobs[job_id].spec
            held.append(Holding(spec.queue, job_user(spec), spec.resources, running))
    return held


def check_pending_cap(state: MasterState, tree: QueueTree, spec: JobSpec) -> None:
    """Raises ResourceExhausted if the job's tasks would take its user past the
    `max_pending_per_user` of its queue or of a queue above it. Runs in the submit, with
    no await before the Submit event: two submits cannot both pass on the same room."""
    limits = []
    path: str | None = spec.queue
    while path:
        node = tree.node(path)
        if node is not None and node.caps.max_pending_per_user is not None:
            limits.append((path, node.caps.max_pending_per_user))
        path = tree.parent(path)
    if not limits:
        return
    user = job_user(spec)
    asked = len(parse_array(spec.array)[0]) if spec.array else spec.tasks
    for queue, limit in limits:
        waiting = _waiting_tasks(state, queue, user)
        if waiting + asked > limit:
            raise pending_cap_error(queue, user, limit, waiting, asked)


def _waiting_tasks(state: MasterState, queue: str, user: str) -> int:
    """The user's tasks not started yet in `queue` and below (held jobs' too)."""
    inside = queue + "."
    waiting = 0
    for job_id, counts in state.counts.items():
        pending = counts[TaskState.PENDING]
        if not pending:
            continue
        job = state.jobs[job_id]
        if job.cancelled or job.finished_at:
            continue
        if (job.spec.queue == queue or job.spec.queue.startswith(inside)) and job_user(job.spec) == user:
            waiting += pending
    return waiting
