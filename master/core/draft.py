"""A step being built by the transitions: reads see the step's own changes over the
state, and `finish` derives each changed job's state from counts, then lets the jobs
that ended release (or cancel) the jobs that wait on them (master/core/batch.py)."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from tcluster.master.core.events import KillIntent, NodeLive, Now, Step
from tcluster.master.core.ledgerrows import AttemptEnd, attempt_rows
from tcluster.master.core.state import MasterState, derive_job, virtual_counts
from tcluster.domain.model import Job, JobState, Task, TaskState


class _WrittenJobs(dict[str, Job]):
    """The step's jobs, remembering which were written since `take` (so that `finish`
    re-derives only those: a chain of N dependents ends in N passes of O(1) each, where
    re-deriving every changed job each pass was O(N^2): 600 jobs blocked the loop 6-20 s)."""

    def __init__(self) -> None:
        super().__init__()
        self.written: set[str] = set()

    def __setitem__(self, job_id: str, job: Job) -> None:
        self.written.add(job_id)
        super().__setitem__(job_id, job)

    def take(self) -> set[str]:
        written, self.written = self.written, set()
        return written


class Draft:
    """A step being built: reads see the step's own changes over the state."""

    def __init__(self, state: MasterState, now: Now) -> None:
        self.state, self.now, self.step = state, now, Step()
        self._jobs = _WrittenJobs()
        self.step.jobs = self._jobs
        self._before: dict[str, Task | None] = {}
        self._task_ids: dict[str, set[str]] = {}        # job -> its tasks this step changed
        self._touched: set[str] = set()                 # jobs whose tasks changed since the last derive
        # Called with each job that ended in this step (batch.resolve_dependents), set by handle().
        self.on_job_end: Callable[[Draft, str], None] | None = None
        self.attempt_ends: dict[str, AttemptEnd] = {}     # how an attempt ended, as its end said

    def task(self, task_id: str) -> Task | None:
        return self.step.tasks.get(task_id) or self.state.task(task_id)

    def job(self, job_id: str) -> Job:
        return self.step.jobs.get(job_id) or self.state.jobs[job_id]

    def job_state(self, job_id: str) -> JobState | None:
        """A job's state, also of one no longer in memory but waited on (state.ended)."""
        job = self.step.jobs.get(job_id) or self.state.jobs.get(job_id)
        if job is not None:
            return job.state
        return self.step.known_states.get(job_id) or self.state.ended.get(job_id)

    def put(self, task: Task) -> None:
        self._before.setdefault(task.id, self.state.task(task.id))
        self.step.tasks[task.id] = task
        self._task_ids.setdefault(task.job_id, set()).add(task.id)
        self._touched.add(task.job_id)

    def intent(self, task_id: str, attempt: int) -> KillIntent | None:
        key = (task_id, attempt)
        if key in self.step.kills_del:
            return None
        return self.step.kills_put.get(key) or self.state.kills.get(key)

    def drop_intent(self, task_id: str, attempt: int) -> None:
        key = (task_id, attempt)
        self.step.kills_put.pop(key, None)
        if key in self.state.kills:
            self.step.kills_del.add(key)

    def live(self, node: str) -> NodeLive | None:
        return self.step.live.get(node) or self.state.live.get(node)

    def finish(self) -> Step:
        """Derives the state of every job whose tasks changed, from counts; a job that
        ended releases or cancels those waiting on it, which may end more (a chain)."""
        if not self.step.tasks and not self.step.jobs:
            return self.step   # heartbeats: nothing to derive
        handled: set[str] = set()
        while ended := [j for j in self._derive() if j not in handled]:
            handled.update(ended)
            for job_id in ended:
                if self.on_job_end is not None:
                    self.on_job_end(self, job_id)
        self._ledger(handled)
        return self.step

    def _ledger(self, ended_jobs: set[str]) -> None:
        """The rows of the attempts that ended in this step (written with it)."""
        changes = {tid: (self._before.get(tid), t) for tid, t in self.step.tasks.items()
                   if (b := self._before.get(tid)) is not None and b.state.holds_resources}
        if not changes:
            return
        jobs = {t.job_id: self.job(t.job_id) for _, t in changes.values()}
        # a heartbeat's sample only for ends that carried no usage (a lost node): building one costs
        samples = {tid: u for tid, (b, t) in changes.items()
                   if b is not None and t.usage is b.usage and (u := self.state.usage.get(tid)) is not None}
        self.step.ledger = attempt_rows(changes, jobs, self.attempt_ends, ended_jobs, samples, self.now.wall)

    def _delta(self, job_id: str) -> Counter[TaskState]:
        """How the step's changes to a job's tasks move its counts."""
        delta: Counter[TaskState] = Counter()
        for task_id in self._task_ids.get(job_id, ()):
            before = self._before.get(task_id)
            if before is not None:
                delta[before.state] -= 1
            delta[self.step.tasks[task_id].state] += 1
        return delta

    def _derive(self) -> list[str]:
        """Re-derives the jobs changed since the last pass (their tasks or their record);
        returns those terminal now that were not before."""
        changed = self._touched | self._jobs.take()
        self._touched = set()
        ended = []
        for job_id in changed:
            counts = Counter(self.state.counts.get(job_id, Counter()))
            counts.update(self._delta(job_id))
            job_before = self.state.jobs.get(job_id)
            counts.update(virtual_counts(self.job(job_id)))      # an array's indexes without rows
            if job_before is not None:
                counts.subtract(virtual_counts(job_before))
            job = derive_job(self.job(job_id), counts, self.now.wall)
            if job != job_before:
                dict.__setitem__(self._jobs, job_id, job)      # derived: not a change to derive again
            if job.state.terminal and job.finished_at and (job_before is None or not job_before.finished_at):
                ended.append(job_id)
        return sorted(ended)
