"""How the master stops attempts: kill intents (persisted, resent until the end arrives)
with the grace their kind asks for, and what each kind of end means for the task and its
job: a cancel ends it, a preemption requeues it (or cancels the job), a gang restarts or
ends whole. Pure, on a Draft."""

from __future__ import annotations

from dataclasses import replace

from tcluster.master.core.draft import Draft
from tcluster.master.core.events import Kill, KillIntent, KillMode
from tcluster.domain.arrays import IndexSet
from tcluster.domain.model import Job, Task, TaskState


def cancel_job(d: Draft, job: Job, reason: str, pending_reason: str) -> None:
    current = d.job(job.id)     # an array's indexes never placed are skipped, rowless
    d.step.jobs[job.id] = replace(current, cancelled=True, unplaced=IndexSet(),
                                  skipped=current.skipped.union(current.unplaced))
    for stored in d.state.tasks[job.id]:
        task = d.task(stored.id) or stored
        if task.state is TaskState.PENDING:
            d.put(replace(task, state=TaskState.KILLED, reason=pending_reason, finished_at=d.now.wall))
        elif task.state.holds_resources and d.intent(task.id, task.attempt) is None:
            want_killed(d, task, reason)


def want_killed(d: Draft, task: Task, reason: str, mode: KillMode = KillMode.END, by_job: str = "") -> None:
    intent = KillIntent(task.id, task.attempt, task.node, reason, mode, by_job)
    d.step.kills_put[(task.id, task.attempt)] = intent
    if d.state.connected(task.node):
        d.step.actions.append(Kill(task.node, task.id, task.attempt, reason, grace(d, intent)))


def grace(d: Draft, intent: KillIntent) -> float:
    """Preempted tasks get --preempt-grace-s between SIGTERM and SIGKILL; others the agent's."""
    return d.state.timeouts.preempt_grace_s if intent.mode is KillMode.REQUEUE else 0.0


def requeued_end(d: Draft, task: Task, intent: KillIntent, at: float) -> bool:
    """An attempt stopped to run again ended (however): True if `intent` was such a stop."""
    if intent.mode is KillMode.REQUEUE:
        preempted(d, task, intent, at)
    elif intent.mode in (KillMode.GANG, KillMode.ASKED):
        job = d.job(task.job_id)
        if job.cancelled or job.finished_at:
            d.put(ended(task, TaskState.KILLED, intent.reason, at or d.now.wall))
        else:
            why = f"attempt {task.attempt} {intent.reason}" if intent.mode is KillMode.ASKED else intent.reason
            d.put(replace(task, state=TaskState.PENDING, node="", exit_code=None, signal=0, reason=why))
    else:
        return False
    return True


def preempted(d: Draft, task: Task, intent: KillIntent, at: float) -> None:
    """A preempted attempt ended: the task waits again (no retry used), or, if its job
    asked `--on-preempt cancel`, the job is cancelled. A gang is requeued whole."""
    job = d.job(task.job_id)
    if job.cancelled:
        d.put(ended(task, TaskState.KILLED, intent.reason, at or d.now.wall))
    elif job.spec.on_preempt == "cancel":
        d.put(ended(task, TaskState.KILLED, f"{intent.reason}; the job asked --on-preempt cancel", at or d.now.wall))
        cancel_job(d, job, f"cancelled: task {task.index} was preempted (--on-preempt cancel)",
                    f"cancelled before it started: task {task.index} was preempted (--on-preempt cancel)")
    else:
        d.put(replace(task, state=TaskState.PENDING, node="", exit_code=None, signal=0,
                      preemptions=task.preemptions + 1, reason=f"attempt {task.attempt} {intent.reason}; requeued"))
        if job.spec.gang:
            restart_gang(d, job, f"gang member {task.index} was preempted", task.id)


def end_attempt(d: Draft, task: Task, state: TaskState, reason: str, exit_code: int | None, signal: int,
                 at: float) -> None:
    """An attempt ended: the task ends too, unless the job asked for retries of failures."""
    if gang_member_ended(d, task, state, reason, at):
        return
    job = d.job(task.job_id)
    failed = state in (TaskState.FAILED, TaskState.LOST)
    failures = task.failures + failed
    if failed and not job.cancelled and task.failures < job.spec.retries:
        d.put(replace(task, state=TaskState.PENDING, node="", failures=failures, exit_code=None, signal=0,
                      reason=f"attempt {task.attempt} {state.value}: {reason}; retry {failures} of {job.spec.retries}"))
        return
    d.put(replace(task, state=state, reason=reason, exit_code=exit_code, signal=signal, finished_at=at or d.now.wall,
                  failures=failures))


# ---- gangs: all members run together, or none does ----

GANG_TIMEOUT_S = 300.0      # --gang-timeout-s's default
GANG_RESTARTS = 3           # --gang-restart without --retries


def gang_member_ended(d: Draft, task: Task, state: TaskState, reason: str, at: float) -> bool:
    """A member ended other than SUCCEEDED: the gang restarts (--gang-restart, or --retries
    left) or ends; True when handled so. A member that succeeded is just done."""
    job = d.job(task.job_id)
    if not job.spec.gang or job.cancelled or state is TaskState.SUCCEEDED:
        return False
    failures = task.failures + (state in (TaskState.FAILED, TaskState.LOST))
    why = f"gang member {task.index} {state.value}: {reason}"
    allowed = job.spec.retries or (GANG_RESTARTS if job.spec.gang_restart else 0)
    if task.failures < allowed:
        d.put(replace(task, state=TaskState.PENDING, node="", failures=failures, exit_code=None, signal=0,
                      reason=f"attempt {task.attempt} {state.value}: {reason}; the gang restarts "
                             f"({failures} of {allowed})"))
        restart_gang(d, job, why, task.id)
        return True
    d.put(replace(ended(task, state, reason, at or d.now.wall), failures=failures))
    for member in _members(d, job, task.id):
        if member.state is TaskState.PENDING:
            d.put(ended(member, TaskState.KILLED, f"{why}: the gang ends", d.now.wall))
        elif member.state.holds_resources and d.intent(member.id, member.attempt) is None:
            want_killed(d, member, f"{why}: the gang ends")
    return True


def restart_gang(d: Draft, job: Job, why: str, but: str = "") -> None:
    """Every running member is stopped to start again with the others (no retry used)."""
    for member in _members(d, job, but):
        if member.state.holds_resources and d.intent(member.id, member.attempt) is None:
            want_killed(d, member, f"{why}; the gang restarts", KillMode.GANG)


def _members(d: Draft, job: Job, but: str) -> list[Task]:
    return [d.task(t.id) or t for t in d.state.tasks[job.id] if t.id != but]


def ended(task: Task, state: TaskState, reason: str, at: float) -> Task:
    return replace(task, state=state, reason=reason, finished_at=at)
