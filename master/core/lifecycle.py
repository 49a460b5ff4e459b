"""Lifecycle verbs in the master's transitions (README, "Hold, release, requeue, wait"):
`tcl hold` / `tcl release` keep a job's pending work from the scheduler or give it back,
`tcl requeue` sends tasks back to waiting (a running attempt is stopped first, through a
persisted kill intent, so two copies never run), and `tcl update` of a pending job's
spec. Who may ask, and whether a new spec passes a submit's checks, is the edge's
(MasterService); these say what each verb means for the rows. Pure, on a Draft."""

from __future__ import annotations

from dataclasses import replace

from tcluster.domain.arrays import IndexSet
from tcluster.domain.errors import FailedPrecondition, InvalidArgument, NotFound
from tcluster.domain.model import Job, JobSpec, Task, TaskState
from tcluster.master.core.draft import Draft
from tcluster.master.core.events import HoldJob, KillMode, RequeueTasks
from tcluster.master.core.stopping import want_killed
from tcluster.scheduler.reasons import never_fits_reason


def _live_job(d: Draft, job_id: str, verb: str) -> Job:
    job = d.state.jobs.get(job_id)
    if job is None:
        raise NotFound(f"job {job_id[:64]!r} not found")
    if job.finished_at or job.cancelled:
        raise FailedPrecondition(f"job {job_id} already ended ({job.state.value}): nothing to {verb}")
    return job


def _pending_count(d: Draft, job: Job) -> int:
    return d.state.counts[job.id][TaskState.PENDING]


def hold(d: Draft, ev: HoldJob) -> None:
    """Hold: its pending tasks wait until released (running ones keep running). Release: they
    are offered to the scheduler again. Holding a held job, or releasing one not held, is
    refused naming its state, so a script learns it asked for nothing."""
    job = _live_job(d, ev.job_id, "hold" if ev.hold else "release")
    if not ev.hold:
        if not job.held_by:
            raise FailedPrecondition(f"job {job.id} is not held")
        d.step.jobs[job.id] = replace(job, held_by="")
        return
    if job.held_by:
        raise FailedPrecondition(f"job {job.id} is already held by {job.held_by}")
    if not _pending_count(d, job):
        raise FailedPrecondition(f"job {job.id} has nothing pending to hold: its tasks are running or ended "
                                 "(hold keeps pending work only; tcl cancel or tcl requeue stop running work)")
    d.step.jobs[job.id] = replace(job, held_by=ev.by)


def requeue(d: Draft, ev: RequeueTasks) -> None:
    """The named tasks (all without `indexes`) wait again: a running attempt is stopped first
    (kill intent ASKED: its end, whatever it is, makes the task PENDING), an ended one waits
    at once. The next attempt gets the next number; no retry is used."""
    job = d.state.jobs.get(ev.job_id)
    if job is None:
        raise NotFound(f"job {ev.job_id[:64]!r} not found")
    if job.cancelled:
        raise FailedPrecondition(f"job {job.id} was cancelled: it is not requeued (submit it again)")
    if job.spec.gang and ev.indexes is not None:
        raise InvalidArgument("tasks", "a gang's tasks start together: requeue the whole job (no --tasks)")
    chosen = [d.task(t.id) or t for t in d.state.tasks[job.id] if ev.indexes is None or t.index in ev.indexes]
    if ev.indexes is not None:
        _check_named(job, chosen, ev.indexes)
    reason = f"requeued by {ev.by} (tcl requeue)"
    changed = 0
    for task in chosen:
        if task.state.holds_resources:
            if d.intent(task.id, task.attempt) is None:
                want_killed(d, task, reason, KillMode.ASKED)
                changed += 1
        elif task.state.terminal:
            d.put(_waiting_again(task, reason))
            changed += 1
    if not changed:
        raise FailedPrecondition(f"job {job.id}: nothing to requeue (the tasks named are waiting already, "
                                 "or being stopped)")
    if job.finished_at and job.reason:
        d.step.jobs[job.id] = replace(d.job(job.id), reason="")     # why it ended no longer holds


def _check_named(job: Job, chosen: list[Task], indexes: IndexSet) -> None:
    """Every index named must have a row: an array's unplaced ones wait already, its skipped ones never ran."""
    missing = indexes.without(t.index for t in chosen).first()
    if missing is not None:
        raise InvalidArgument("tasks", f"job {job.id} has no started or ended task {missing} "
                                       "(an index still waiting needs no requeue; one skipped by a cancel never ran)")


def _waiting_again(task: Task, reason: str) -> Task:
    return replace(task, state=TaskState.PENDING, node="", exit_code=None, signal=0, finished_at=0.0,
                   reason=f"attempt {task.attempt} {task.state.value}; {reason}")


def update_spec(d: Draft, job: Job, spec: JobSpec) -> None:
    """A pending job's new spec (validated at the edge as a submit's): refused while any task
    holds a node (its request is in force there), and where no node could ever hold it."""
    if job.finished_at or job.cancelled:
        raise FailedPrecondition(f"job {job.id} already ended ({job.state.value}): nothing to update")
    counts = d.state.counts[job.id]
    running = counts[TaskState.STARTING] + counts[TaskState.RUNNING]
    if running:
        raise FailedPrecondition(
            f"job {job.id} has {running} task(s) running or starting: cpu, memory, time limit, queue and weight "
            "change only while none runs (tcl requeue or tcl cancel them first)")
    if not counts[TaskState.PENDING]:
        raise FailedPrecondition(f"job {job.id} has nothing pending to update")
    nodes = [(n.name, n.capacity) for n in d.state.nodes.values()]
    if nodes and not any(spec.resources.fits_in(c) for _, c in nodes):
        reason = never_fits_reason(spec.resources, nodes)
        if reason:
            raise InvalidArgument("resources", reason)
    d.step.jobs[job.id] = replace(job, spec=spec)
    d.step.specs.add(job.id)
