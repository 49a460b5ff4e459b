"""The usage ledger's rows of a step: one per attempt that ended in it (README, "Usage
ledger"). An attempt ends where a task that held resources (STARTING, RUNNING) no longer
does, or holds them for a later attempt: so every way an attempt ends (a report, a retry,
a preemption, a gang's restart, a lost node) makes its row in the step that commits the
end, and the store writes both in one transaction (SQLite) or the row's hourly roll-up
in the same transaction as the end (etcd). A row is keyed by (task, attempt): a repeat
write changes nothing, so the row is kept exactly once. Pure."""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from tcluster.domain.ledger import LedgerRow, cut_reason
from tcluster.domain.model import Job, Task, TaskState
from tcluster.domain.resources import GPU
from tcluster.domain.taskusage import TaskUsage

# How an attempt ended, told by the transition that saw its end (state, exit code, when):
# the task's own row may no longer say (a retried task is PENDING again, its exit code cleared).
AttemptEnd = tuple[str, "int | None", float]


def attempt_rows(changes: Mapping[str, tuple[Task | None, Task]], jobs: Mapping[str, Job],
                 ends: Mapping[str, AttemptEnd], ended_jobs: set[str], last_usage: Mapping[str, TaskUsage],
                 now: float) -> list[LedgerRow]:
    """`changes`: task id -> (before the step, after it); `ended_jobs`: jobs that ended in
    the step (their last row counts the job); `last_usage`: the newest heartbeat sample of
    tasks whose end carried none (a lost node)."""
    rows: list[LedgerRow] = []
    for task_id, (before, after) in sorted(changes.items()):
        if before is None or not before.state.holds_resources:
            continue
        if after.state.holds_resources and after.attempt == before.attempt:
            continue
        rows.append(_row(before, after, jobs[after.job_id], ends.get(task_id), last_usage.get(task_id), now))
    last_of_job: dict[str, int] = {}
    for n, row in enumerate(rows):
        if row.job_id in ended_jobs:
            last_of_job[row.job_id] = n
    for n in last_of_job.values():
        rows[n] = _with_job_end(rows[n])
    return rows


def _row(before: Task, after: Task, job: Job, end: AttemptEnd | None, sample: TaskUsage | None,
         now: float) -> LedgerRow:
    usage = after.usage
    if sample is not None and sample.cpu_seconds > usage.cpu_seconds:
        usage = sample
    state, exit_code, at = end if end is not None else (after.state.value, after.exit_code, now)
    ended_at = after.finished_at if after.state.terminal and after.finished_at else at
    started_at = before.started_at or ended_at
    if after.state is TaskState.PENDING and after.preemptions > before.preemptions:
        state = "PREEMPTED"
    elif after.state is TaskState.PENDING and after.failures == before.failures:
        state = "REQUEUED"                     # a gang restart, a refused launch: no retry used
    spec = job.spec
    gpus = len(before.gpus) or int(spec.resources.get(GPU))
    return LedgerRow(
        job_id=after.job_id, index=after.index, attempt=before.attempt, user=spec.owner or spec.user,
        queue=spec.queue, node=before.node, state=state, reason=cut_reason(after.reason), exit_code=exit_code,
        started_at=started_at, ended_at=ended_at, cpu_seconds=max(0.0, usage.cpu_seconds),
        memory_peak_bytes=max(0, usage.memory_peak_bytes), gpu_seconds=gpus * max(0.0, ended_at - started_at),
        cpu_request=spec.resources.cpu)


def _with_job_end(row: LedgerRow) -> LedgerRow:
    return replace(row, job_end=True)
