"""The master's transitions: `handle(state, event, now) -> Step`. Pure: reads the state,
never changes it; the step says which rows change, what liveness becomes and what to
send. The I/O layer writes the rows, then `state.apply(step)`, then sends.

Rules users rely on (README, "Faults"):
- every task ends exactly once: an attempt's end is taken only from the node and attempt
  that run it; anything else is stale and ignored;
- kill intent is state: persisted, resent at every registration until the end arrives;
- a node silent for node_timeout_s is DOWN; node_timeout_s + lost_timeout_s after its last
  message its tasks are LOST; a job's `retries` re-runs FAILED and LOST attempts;
- a launch that does not start within start_timeout_s is stopped, then counted LOST."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable

from tcluster.domain.arrays import MAX_INDEX_RUNS, IndexSet, parse_array
from tcluster.domain.errors import FailedPrecondition, InvalidArgument, NotFound
from tcluster.domain.lifecycle import can_transition
from tcluster.master.core.batch import materialize, new_job, resolve_dependents, update_job
from tcluster.master.core.draft import Draft
from tcluster.master.core.stopping import (
    GANG_TIMEOUT_S, cancel_job, end_attempt, ended, grace, requeued_end, restart_gang, want_killed,
)
from tcluster.master.core.events import (
    AccrueUsage,
    Ack, AgentJoined, AgentLeft, Beat, Cancel, CancelTasks, Cordon, Disconnect, Drain, Event, Kill, KillIntent,
    Forget, HoldJob, KillMode, Launch, Maintain, NodeLive, Now, Place, Preempt, Reports, Step, RequeueTasks, Submit, SubmitPinned, Tick,
    Uncordon, UpdateJob, Welcome,
)
from tcluster.master.core import lifecycle, nodeops
from tcluster.master.core.unreachable import forget, lose
from tcluster.master.core.pinning import pinnable
from tcluster.domain.reports import TaskReport
from tcluster.wire.features import report_silence_limit
from tcluster.master.core.liveness import beat, left, usage_interval_of
from tcluster.master.core.state import MasterState
from tcluster.domain.units import format_duration
from tcluster.domain.model import Node, NodeState, Task, TaskState
from tcluster.domain.model import task_id as make_task_id
from tcluster.domain.ceilings import refusal
from tcluster.domain.nodeorders import READY_OPS
from tcluster.scheduler.reasons import never_fits_reason
from tcluster.scheduler.backfill import BACKFILLED

log = logging.getLogger(__name__)
CANCELLED = "cancelled"
TIME_LIMIT = "TimeLimit"


def handle(state: MasterState, event: Event, now: Now) -> Step:
    draft = Draft(state, now)
    draft.on_job_end = resolve_dependents
    _HANDLERS[type(event)](draft, event)
    return draft.finish()


# ---- jobs ----

def _submit(d: Draft, ev: Submit) -> None:
    # The spec was validated once, at the edge (MasterService.submit): trusted here.
    # Usually the first node holds it: the reason (a pass over every node) only when none does.
    if not any(ev.spec.resources.fits_in(n.capacity) for n in d.state.nodes.values()):
        reason = never_fits_reason(ev.spec.resources, [(n.name, n.capacity) for n in d.state.nodes.values()])
        if reason:
            raise InvalidArgument("", reason)
    # Node limits are ceilings: what no node allows is refused now (each agent clamps too).
    refused = refusal({"pids_max": ev.spec.pids_max, "log_max_bytes": ev.spec.log_max_bytes},
                      (n.ceilings for n in d.state.nodes.values()))
    if refused is not None:
        raise refused
    if ev.job_id in d.state.jobs:
        raise FailedPrecondition(f"job id {ev.job_id} is taken")
    job, rows = new_job(d, ev)
    d.step.jobs[ev.job_id] = job
    for task in rows:
        d.put(task)


def _submit_pinned(d: Draft, ev: SubmitPinned) -> None:
    """No fairness round: the GM chose the node and the LM checked the room. A node that
    has no room now (a preemption's victims still stopping) gets the task when it has."""
    _submit(d, Submit(ev.job_id, ev.spec))
    if pinnable(d.state, ev.node) and ev.spec.resources.fits_in(d.state.free(ev.node)):
        _place(d, Place(((make_task_id(ev.job_id, 0), ev.node),)))


def _cancel(d: Draft, ev: Cancel) -> None:
    if ev.job_id not in d.state.jobs:
        raise NotFound(f"job {ev.job_id[:64]!r} not found")
    job = d.state.jobs[ev.job_id]
    if job.state.terminal and not job.cancelled:
        raise FailedPrecondition(f"job {ev.job_id} already ended: {job.state.value}")
    cancel_job(d, job, CANCELLED, "cancelled before it started")


def _preempt(d: Draft, ev: Preempt) -> None:
    for task_id, attempt, reason, by_job in ev.victims:
        task = d.task(task_id)
        if task is None or task.attempt != attempt or not task.state.holds_resources:
            continue          # it ended since the round's snapshot: the next round decides again
        if d.intent(task_id, attempt) is None:
            want_killed(d, task, reason, KillMode.REQUEUE, by_job)


def _cancel_tasks(d: Draft, ev: CancelTasks) -> None:
    """Some of a job's tasks: those waiting end (an array's unplaced indexes are skipped),
    running ones are killed; the others (ended, or not in the job) are left as they are."""
    if ev.job_id not in d.state.jobs:
        raise NotFound(f"job {ev.job_id[:64]!r} not found")
    job = d.state.jobs[ev.job_id]
    if job.finished_at:
        raise FailedPrecondition(f"job {ev.job_id} already ended: {job.state.value}")
    whole = parse_array(job.spec.array)[0] if job.spec.array else IndexSet.span(job.spec.tasks)
    if not whole.without(ev.indexes):
        return _cancel(d, Cancel(job.id))      # every index named: the job is cancelled, as by `tcl cancel JOB`
    gone = job.unplaced.intersection(ev.indexes)      # arithmetic on runs: `--tasks 0-99999999` is cheap
    if gone:
        unplaced, skipped = job.unplaced.without(gone), job.skipped.union(gone)
        _check_fragments(job.id, unplaced, skipped)
        d.step.jobs[job.id] = replace(job, unplaced=unplaced, skipped=skipped)
    for stored in d.state.tasks[job.id]:
        task = d.task(stored.id) or stored
        if task.index not in ev.indexes:
            continue
        if task.state is TaskState.PENDING:
            d.put(replace(task, state=TaskState.KILLED, reason="cancelled before it started (tcl cancel --tasks)",
                          finished_at=d.now.wall))
        elif task.state.holds_resources and d.intent(task.id, task.attempt) is None:
            want_killed(d, task, "cancelled (tcl cancel --tasks)")


def _check_fragments(job_id: str, *sets: IndexSet) -> None:
    """Issue 36 #5: each `--tasks A-B:STEP` cut an array's runs further, without bound
    (~2.4 MB of state a cancel, stalls of seconds, then replies over the message bound);
    a cancel that would leave more runs than MAX_INDEX_RUNS is refused before any write."""
    runs = max(len(s.runs) for s in sets)
    if runs > MAX_INDEX_RUNS:
        raise InvalidArgument("tasks", f"would split job {job_id}'s indexes into {runs:,} ranges; at most "
                                       f"{MAX_INDEX_RUNS:,} are kept: cancel fewer, wider ranges, or the whole job")


def _update(d: Draft, ev: UpdateJob) -> None:
    if ev.spec is not None:
        job = d.state.jobs.get(ev.job_id)
        if job is None:
            raise NotFound(f"job {ev.job_id[:64]!r} not found")
        lifecycle.update_spec(d, job, ev.spec)
    update_job(d, ev)


def _place(d: Draft, ev: Place) -> None:
    fresh = materialize(d, ev.placements)   # an array's indexes placed for the first time: STARTING rows
    notes = dict(ev.notes)                   # `tcl why` reads a backfilled task's start from its reason
    for task_id, node in ev.placements:
        started = fresh.get(task_id)
        if started is not None:
            started = replace(started, reason=notes[started.job_id]) if started.job_id in notes else started
            d.put(started)
            d.step.actions.append(Launch(task_id, 1, started.job_id, started.index, d.job(started.job_id).spec,
                                         node=node))
            continue
        task = d.task(task_id)
        if task is None or task.state is not TaskState.PENDING or not d.state.connected(node):
            continue       # the world moved since the round's snapshot: the next round retries
        # A retried (or preempted) task keeps the reason of the attempt that ended until this one ends.
        started = replace(task, state=TaskState.STARTING, node=node, attempt=task.attempt + 1,
                          reason=notes.get(task.job_id) or (task.reason if task.failures or task.preemptions else ""))
        d.put(started)
        d.step.actions.append(Launch(task_id, started.attempt, task.job_id, task.index,
                                     d.job(task.job_id).spec, node=node, preemptions=task.preemptions))


# ---- agents ----

def _joined(d: Draft, ev: AgentJoined) -> None:
    reg = ev.registration
    # A node still marked connected registers again: its old stream is half-open (the I/O
    # layer has closed it); the newest registration wins. What an operator asked stays.
    known = d.state.nodes.get(reg.node)
    node = Node(name=reg.node, capacity=(reg.capacity - reg.reserved).clamp_nonnegative(), reserved=reg.reserved,
                labels=reg.labels, state=NodeState.READY, last_seen=d.now.wall, runtime=reg.runtime,
                ceilings=reg.ceilings, ops=known.ops if known is not None else READY_OPS)
    d.step.nodes[node.name] = node
    interval, cluster = usage_interval_of(d, reg)
    limit = report_silence_limit(d.state.timeouts.node_timeout_s, interval) if interval else 0.0
    d.step.live[node.name] = NodeLive(True, d.now.mono, d.now.wall, limit, interval, reg.usage_interval_s > 0)
    _apply_reports(d, reg.node, reg.reports)
    running = set(reg.running)
    _reconcile_missing(d, reg.node, running)
    kills = [_unwanted(d, reg.node, task_id, attempt) for task_id, attempt in sorted(running)]
    d.step.actions.append(Welcome(reg.node, d.state.timeouts.heartbeat_interval_s,
                                  tuple(k for k in kills if k is not None), d.state.timeouts.fence_after_s,
                                  usage_interval_s=interval, cluster_nodes=cluster))
    if reg.reports:
        d.step.actions.append(Ack(reg.node, reg.last_seq))


def _reconcile_missing(d: Draft, node: str, running: set[tuple[str, int]]) -> None:
    """Tasks the master placed here that the agent does not run (nor reported ending)."""
    for task in d.state.tasks_on(node):
        current = d.task(task.id)
        if current is None or not current.state.holds_resources or current.node != node:
            continue
        if (current.id, current.attempt) in running:
            continue
        intent = d.intent(current.id, current.attempt)
        d.drop_intent(current.id, current.attempt)
        if intent is not None and requeued_end(d, current, intent, d.now.wall):
            pass
        elif intent is not None and not intent.retry:
            d.put(ended(current, TaskState.KILLED, f"{intent.reason}; gone from node {node}", d.now.wall))
        elif current.state is TaskState.STARTING and intent is None:
            # The launch never reached the agent (e.g. the master died right after placing).
            d.put(replace(current, state=TaskState.PENDING, node="", reason=f"requeued: node {node} never got it"))
        else:
            end_attempt(d, current, TaskState.LOST, f"node {node} no longer runs it", None, 0, d.now.wall)
    for (task_id, attempt), _ in d.state.kills_on(node):   # this node's, not every intent
        if (task_id, attempt) not in running:
            d.drop_intent(task_id, attempt)


def _unwanted(d: Draft, node: str, task_id: str, attempt: int) -> Kill | None:
    intent = d.intent(task_id, attempt)
    if intent is not None:
        return Kill(node, task_id, attempt, intent.reason, grace(d, intent))
    task = d.task(task_id)
    if task is None:
        return Kill(node, task_id, attempt, "unknown to the master")
    if task.node != node or task.attempt != attempt or not task.state.holds_resources:
        return Kill(node, task_id, attempt, f"attempt {attempt} is no longer wanted ({task.state.value})")
    return None


def _reports(d: Draft, ev: Reports) -> None:
    live = d.live(ev.node)
    if live is None or not live.connected:
        return
    d.step.live[ev.node] = replace(live, last_seen=d.now.mono, last_seen_wall=d.now.wall)
    _apply_reports(d, ev.node, ev.reports)
    d.step.actions.append(Ack(ev.node, ev.last_seq))


def _apply_reports(d: Draft, node: str, reports: tuple[TaskReport, ...]) -> None:
    for report in reports:
        task = d.task(report.task_id)
        intent = d.intent(report.task_id, report.attempt)
        # Only the node the attempt was sent to ends its kill intent: another node's word is no proof.
        if (report.state.terminal or report.rejected) and intent is not None and intent.node == node:
            d.drop_intent(report.task_id, report.attempt)
        if task is None or task.node != node or task.attempt != report.attempt:
            log.info("ignoring stale report %s attempt %s from %s", report.task_id, report.attempt, node)
            continue
        _apply_report(d, task, report, intent)


def _apply_report(d: Draft, task: Task, report: TaskReport, intent: KillIntent | None) -> None:
    if report.rejected:
        if task.state is TaskState.STARTING:
            d.put(replace(task, state=TaskState.PENDING, node="", reason=f"node {task.node} refused it: {report.reason}"))
        return
    if not can_transition(task.state, report.state):
        return            # a repeat (RUNNING again) or a late report after the end
    if report.state is TaskState.RUNNING:
        keep = task.failures or task.preemptions or task.reason.startswith(BACKFILLED)   # for `tcl why`
        reason = task.reason if keep else ""
        # A later attempt's start is its own (the ledger's wall time, its time limit, preemption's minimum runtime).
        started = (report.at or d.now.wall) if task.attempt > 1 else (task.started_at or report.at)
        d.put(replace(task, state=TaskState.RUNNING, reason=reason, started_at=started,
                      gpus=report.gpus))
        return
    final = task if report.usage is None else replace(task, usage=report.usage)
    d.attempt_ends[task.id] = (report.state.value, report.exit_code, report.at or d.now.wall)
    if intent is not None and intent.mode is KillMode.TIMELIMIT and report.state is not TaskState.SUCCEEDED:
        d.put(replace(final, state=TaskState.FAILED, reason=TIME_LIMIT, exit_code=report.exit_code,
                      signal=report.signal, finished_at=report.at or d.now.wall))
        return
    asked = intent is not None and intent.mode is KillMode.ASKED   # `tcl requeue`: whatever the end
    if intent is not None and (asked or report.state is not TaskState.SUCCEEDED) and requeued_end(d, final, intent, report.at):
        return   # however it ended after SIGTERM: it was stopped to run again (preempted, its gang restarts)
    if intent is not None and intent.retry and report.state is TaskState.KILLED:
        end_attempt(d, final, TaskState.LOST, intent.reason, report.exit_code, report.signal, report.at)
        return
    if intent is None and report.state is TaskState.KILLED:
        # Killed with no kill asked for: its node fenced it (cut off from the master, or its
        # shim with no agent), so the master may place it again: a lost attempt, retried
        # if the job has retries left, as after the master's own LOST.
        end_attempt(d, final, TaskState.LOST, report.reason, report.exit_code, report.signal, report.at)
        return
    end_attempt(d, final, report.state, report.reason, report.exit_code, report.signal, report.at)


# ---- timeouts ----

def _tick(d: Draft, ev: Tick) -> None:
    t = d.state.timeouts
    for name, live in d.state.live.items():   # oldest first (MasterState._set_live)
        silent = d.now.mono - live.last_seen
        if silent <= t.node_timeout_s:
            break   # every node after this one was heard from since: O(silent nodes), not O(nodes)
        if live.connected and live.report_limit_s and silent <= live.report_limit_s:
            continue      # its stream is up (keepalive closes a dead one's) and a report is not overdue
        if live.connected and silent > t.node_timeout_s:
            log.warning("node %s silent for %.1fs: DOWN", name, silent)
            d.step.actions.append(Disconnect(name, f"silent for {silent:.0f}s"))
            left(d, AgentLeft(name))
        elif not live.connected and silent > t.node_timeout_s + t.lost_timeout_s:
            for task in d.state.tasks_on(name):
                lose(d, task, f"node {name} unreachable for {silent:.0f}s")
    _start_deadlines(d)
    _time_limits(d)
    _gang_timeouts(d)
    nodeops.tick(d)
    _forget_old_jobs(d)


def _start_deadlines(d: Draft) -> None:
    limit = d.state.timeouts.start_timeout_s
    d.step.ticked = d.now.mono
    # Only launches past the deadline (StartIndex), in the order they began: O(those), not O(STARTING)
    for task_id, _ in d.state.starts.due(d.now.mono, limit):
        task = d.state.task(task_id)
        if task is None or not d.state.connected(task.node):
            continue
        if d.intent(task_id, task.attempt) is None:
            reason = f"did not start within {limit:.0f}s on node {task.node}"
            want_killed(d, task, reason, KillMode.RETRY)
            d.put(replace(task, reason=f"{reason}; stopping it"))


def _time_limits(d: Draft) -> None:
    """RUNNING attempts past their job's --time-limit: SIGTERM, the grace, SIGKILL; the
    end is FAILED with the reason TimeLimit (no retry: it would run as long again)."""
    d.step.ticked_wall = d.now.wall
    for task_id, attempt, _ in d.state.deadlines.due(d.now.wall):
        task = d.task(task_id)
        if task is None or task.attempt != attempt or task.state is not TaskState.RUNNING:
            continue
        if d.intent(task_id, attempt) is None:
            limit = d.job(task.job_id).spec.time_limit_s
            want_killed(d, task, f"{TIME_LIMIT}: ran past --time-limit {format_duration(limit)}", KillMode.TIMELIMIT)


def _gang_timeouts(d: Draft) -> None:
    """A gang whose members are not all RUNNING --gang-timeout-s after their launch began
    is stopped and requeued whole (a member that cannot start must not hold the others)."""
    for job_id in sorted(d.state.gangs):
        job = d.job(job_id)
        limit = job.spec.gang_timeout_s or GANG_TIMEOUT_S
        for task in d.state.tasks[job_id]:
            since = d.state.starts.since.get(task.id)
            if task.state is TaskState.STARTING and since is not None and d.now.mono - since > limit:
                why = f"gang: task {task.index} not RUNNING within {limit:.0f}s of its launch"
                restart_gang(d, job, why)
                break


def _forget_old_jobs(d: Draft) -> None:
    """Once a purge interval: every job that finished before the retention horizon goes,
    in memory and on disk (most of them live only on disk by then)."""
    t = d.state.timeouts
    if d.now.wall - d.state.purged_at >= t.purge_interval_s:
        d.step.purge_before = d.now.wall - t.job_retention_s


def _accrue_usage(d: Draft, ev: AccrueUsage) -> None:
    d.step.decayed_usage = ev.ledger


# Each handler takes the event of its key's type (a mapping no generic type states).
_HANDLERS: dict[type[Event], Callable[[Draft, Any], None]] = {
    Submit: _submit, SubmitPinned: _submit_pinned, Cancel: _cancel, Place: _place, AgentJoined: _joined, AgentLeft: left,
    Reports: _reports, Beat: beat, Tick: _tick, AccrueUsage: _accrue_usage, Preempt: _preempt, CancelTasks: _cancel_tasks, UpdateJob: _update,
    HoldJob: lifecycle.hold, RequeueTasks: lifecycle.requeue,
    Cordon: nodeops.cordon, Uncordon: nodeops.uncordon, Drain: nodeops.drain, Maintain: nodeops.maintain,
    Forget: forget,
}

__all__ = ["Draft", "handle"]
