"""Nodes out of reach: the lost timeout passed (`lose`, per task), or an admin declared the
machine dead (`forget`, `tcl node forget`). A stop to run again that the node never
confirmed is not taken as done for a job the cut-off agent does not fence (no --retries):
its copy may still run (issue 36 #1, README "No two copies")."""

from __future__ import annotations

from dataclasses import replace

from tcluster.domain.errors import FailedPrecondition
from tcluster.domain.model import Task, TaskState
from tcluster.master.core import nodeops
from tcluster.master.core.draft import Draft
from tcluster.master.core.events import Forget, KillIntent, KillMode
from tcluster.master.core.stopping import end_attempt, ended, requeued_end


def lose(d: Draft, task: Task, reason: str) -> None:
    """The node's lost timeout passed with this attempt on it."""
    intent = d.intent(task.id, task.attempt)
    if intent is not None and _stop_unconfirmed(d, task, intent):
        return
    _gone(d, task, intent, reason)


def _gone(d: Draft, task: Task, intent: KillIntent | None, why: str) -> None:
    d.attempt_ends[task.id] = (TaskState.LOST.value, None, d.now.wall)
    if intent is not None and requeued_end(d, task, intent, d.now.wall):
        pass
    elif intent is not None and not intent.retry:
        d.put(ended(task, TaskState.KILLED, f"{intent.reason}; {why}", d.now.wall))
    else:
        end_attempt(d, task, TaskState.LOST, why, None, 0, d.now.wall)
    # Should the node come back with this attempt, its registration kills it as unwanted.
    d.drop_intent(task.id, task.attempt)


def _stop_unconfirmed(d: Draft, task: Task, intent: KillIntent) -> bool:
    """Issue 36 #1: a stop to run again (a drain's deadline, a preemption, a gang restart,
    `tcl requeue`)
    sent to a node that went silent. The cut-off agent fences only jobs with retries (they
    may run elsewhere); for a job without, the old copy may still run, so the task is not
    requeued: it waits, holding its place, until the node confirms the end (its stream
    comes back: the stop is sent again) or an admin says the machine is dead (`tcl node
    forget`). True when it waits."""
    if intent.mode not in (KillMode.REQUEUE, KillMode.GANG, KillMode.ASKED) or d.job(task.job_id).spec.retries > 0:
        return False
    waiting = unconfirmed_reason(task.node)
    if not task.reason.endswith(waiting):
        d.put(replace(task, reason=f"{intent.reason}; {waiting}"))
    return True


def unconfirmed_reason(node: str) -> str:
    return (f"waiting for node {node} to confirm the stop: it is unreachable and the job has no --retries, so "
            f"its copy may still run (tcl node forget {node} if the machine is dead)")


def forget(d: Draft, ev: Forget) -> None:
    """Every named node must be unreachable (a connected one can say what it runs); what
    ran there is lost now, a stop it never confirmed taken as done."""
    nodes = nodeops.named(d, ev.nodes)
    up = [n.name for n in nodes if (live := d.live(n.name)) is not None and live.connected]
    if up:
        raise FailedPrecondition(f"node {up[0]!r} is connected: it reports what it runs (drain it instead)")
    for node in nodes:
        why = f"node {node.name} declared dead by {ev.by}" + (f" ({ev.reason})" if ev.reason else "")
        for stored in d.state.tasks_on(node.name):
            task = d.task(stored.id)
            if task is not None and task.node == node.name and task.state.holds_resources:
                _gone(d, task, d.intent(task.id, task.attempt), why)
