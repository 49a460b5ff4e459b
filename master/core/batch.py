"""Batch work in the master's transitions (README, "Batch work"): arrays whose waiting
indexes are ranges (a task row is made when an index is placed), dependencies resolved on
their predecessors' ends, and what a submit of either checks. Pure, on a Draft."""

from __future__ import annotations

from collections import ChainMap
from dataclasses import replace

from tcluster.domain.arrays import MAX_THROTTLE, IndexSet, parse_array
from tcluster.domain.dependency import Outcome, Verdict, evaluate, parse_dependency
from tcluster.domain.errors import FailedPrecondition, InvalidArgument, NotFound
from tcluster.master.core.chains import chain_depth, check_chain_bounds
from tcluster.master.core.draft import Draft
from tcluster.master.core.events import Submit, UpdateJob
from tcluster.domain.model import Job, Task, TaskState
from tcluster.domain.taskusage import NO_USAGE


def new_job(d: Draft, ev: Submit) -> tuple[Job, list[Task]]:
    """The job a submit makes and the rows it writes: every task of a plain job, none of
    an array (its indexes wait as ranges)."""
    spec, unplaced, throttle = ev.spec, IndexSet(), 0
    if spec.array:
        unplaced, throttle = parse_array(spec.array)
        spec = replace(spec, tasks=len(unplaced))
    job = Job(id=ev.job_id, spec=spec, submitted_at=d.now.wall, unplaced=unplaced, throttle=throttle)
    if spec.dependency:
        d.step.known_states.update(ev.known)
        job = replace(job, released=_check_dependency(d, job))
    rows = [] if spec.array else [Task(ev.job_id, i, usage=NO_USAGE) for i in range(spec.tasks)]
    return job, rows


def _check_dependency(d: Draft, job: Job) -> bool:
    """Refuses a dependency on unknown jobs, or one that can never be met (unless the job
    asked to be kept); True if it is met already."""
    dependency = parse_dependency(job.spec.dependency)
    missing = [j for j in dependency.jobs if d.job_state(j) is None]
    if missing:
        raise InvalidArgument("dependency", f"job {missing[0][:64]!r} not found (a job may wait only on jobs "
                                            "submitted before it: there can be no cycle)")
    check_chain_bounds(dependency.jobs, lambda j: _chain_depth(d, j), lambda j: len(d.state.dependents.get(j, ())))
    verdict = evaluate(dependency, d.job_state)
    if verdict.outcome is Outcome.UNMET and not job.spec.keep_unmet:
        raise InvalidArgument("dependency", f"can never be met: {verdict.why}; add --keep-on-unmet-dependency "
                                            "to submit it anyway")
    return verdict.outcome is Outcome.MET


def _chain_depth(d: Draft, job_id: str) -> int:
    def held(j: str) -> bool:
        job = d.step.jobs.get(j) or d.state.jobs.get(j)
        return job is not None and job.held

    def parents(j: str) -> tuple[str, ...]:
        return parse_dependency(d.job(j).spec.dependency).jobs
    # Memoized over the state's cache, but new depths go to the step: a submit refused after
    # this (or whose write fails) is never applied, so it leaves the cache as it was.
    return chain_depth(job_id, parents, held, ChainMap(d.step.chain_depths, d.state.chain_depths))


def resolve_dependents(d: Draft, ended: str) -> None:
    """`ended` just ended: each job held on it is released, cancelled (naming it), or
    keeps waiting (other terms, or --keep-on-unmet-dependency)."""
    for job_id in sorted(d.state.dependents.get(ended, ())):
        job = d.job(job_id)
        if not job.held:
            continue
        verdict = evaluate(parse_dependency(job.spec.dependency), d.job_state)
        if verdict.outcome is Outcome.MET:
            d.step.jobs[job_id] = replace(job, released=True)
        elif verdict.outcome is Outcome.UNMET and not job.spec.keep_unmet:
            _cancel_unmet(d, job, verdict)


def _cancel_unmet(d: Draft, job: Job, verdict: Verdict) -> None:
    """A held job never started: its rows end KILLED and an array's indexes are skipped."""
    reason = f"cancelled: dependency can no longer be met: {verdict.why}"
    d.step.jobs[job.id] = replace(job, cancelled=True, unplaced=IndexSet(), skipped=job.skipped.union(job.unplaced),
                                  reason=reason)
    for stored in d.state.tasks.get(job.id, ()):
        task = d.task(stored.id) or stored
        if task.state is TaskState.PENDING:
            d.put(replace(task, state=TaskState.KILLED, reason=reason, finished_at=d.now.wall))


def materialize(d: Draft, placements: tuple[tuple[str, str], ...]) -> dict[str, Task]:
    """The rows of the array indexes a Place takes for the first time, by task id, made
    STARTING on their node at once (one object per placed index, as a plain job's). Each
    job's indexes leave its ranges at once: one `without` and one Job copy per job, not
    per index (a copy per index made an array's placements cost twice a plain job's).
    Only indexes placed on a node still connected leave: the others stay unplaced for the
    next round (a row is written only for those, so one left out here would be lost)."""
    wanted: dict[str, list[tuple[int, str]]] = {}
    for task_id, node in placements:
        job_id, _, index_text = task_id.rpartition(".")
        job = d.step.jobs.get(job_id) or d.state.jobs.get(job_id)
        if job is None or not job.unplaced or not index_text.isdigit() or not d.state.connected(node):
            continue
        index = int(index_text)
        if index in job.unplaced:
            wanted.setdefault(job_id, []).append((index, node))
    rows: dict[str, Task] = {}
    for job_id, placed in wanted.items():
        job = d.job(job_id)
        d.step.jobs[job_id] = replace(job, unplaced=job.unplaced.without(i for i, _ in placed))
        rows.update((f"{job_id}.{i}", Task(job_id, i, TaskState.STARTING, node, 1, usage=NO_USAGE)) for i, node in placed)
    return rows


def update_job(d: Draft, ev: UpdateJob) -> None:
    job = d.step.jobs.get(ev.job_id) or d.state.jobs.get(ev.job_id)
    if job is None:
        raise NotFound(f"job {ev.job_id[:64]!r} not found")
    if ev.throttle is not None:
        if not job.spec.array:
            raise InvalidArgument("throttle", f"job {job.id} is not an array: --throttle limits an array's "
                                              "running tasks")
        if job.finished_at:
            raise FailedPrecondition(f"job {job.id} already ended ({job.state.value}): nothing to update")
        if not 0 <= ev.throttle <= MAX_THROTTLE:
            # Issue 36 #3: 2^31 was answered INVALID_ARGUMENT yet written, and every List failed after.
            raise InvalidArgument("throttle", f"{ev.throttle} must be 0 (no limit) to {MAX_THROTTLE:,}")
        d.step.jobs[job.id] = replace(job, throttle=ev.throttle)


def array_pending(job: Job) -> str:
    """`[40-999]`: an array's indexes not yet placed, for tables and reasons."""
    return job.unplaced.compact() if job.unplaced else ""
