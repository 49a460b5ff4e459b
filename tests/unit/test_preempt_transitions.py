"""Preemption in the master's transitions, as tables: a Preempt event writes a REQUEUE
kill intent and sends a Kill with the preemption grace; however the attempt then ends
(killed, failed on SIGTERM, lost with its node, gone at re-registration) the task waits
again without using a retry, or the job is cancelled (--on-preempt cancel), or it
finished first and stays SUCCEEDED. Every end is taken once."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tcluster.master.core.actions import TaskReport
from tcluster.domain.errors import FailedPrecondition
from tcluster.master.core.events import AgentLeft, Forget, Kill, KillMode, Launch, Place, Preempt, Reports, Submit, Tick
from tcluster.master.core.unreachable import unconfirmed_reason
from tcluster.master.core.state import Timeouts
from tcluster.domain.model import JobState, TaskState
from tests.unit.test_master_transitions import J, T, World, ended, running_world, spec

WHY = "Preempted by job other (queue b below its share: 0.00 < 0.50)"


def preempted_world(retries: int = 0, on_preempt: str = "") -> World:
    w = running_world(retries)
    if on_preempt:
        job = w.state.jobs[J]
        w.state.jobs[J] = replace(job, spec=replace(job.spec, on_preempt=on_preempt))
    w.state.timeouts = Timeouts(**{**w.state.timeouts.__dict__, "preempt_grace_s": 7.0})
    step = w.do(Preempt(((T, 1, WHY, "other"),)))
    assert step.kills_put[(T, 1)].mode is KillMode.REQUEUE and step.kills_put[(T, 1)].by_job == "other"
    assert Kill("n1", T, 1, WHY, 7.0) in step.actions
    return w


@pytest.mark.parametrize("report", [
    ended(TaskState.KILLED, code=None),
    ended(TaskState.FAILED, code=143),      # it exited non-zero on SIGTERM
])
def test_a_preempted_attempt_requeues_without_using_a_retry(report: TaskReport) -> None:
    w = preempted_world(retries=0)
    w.do(Reports("n1", (report,), 1))
    task = w.task()
    assert (task.state, task.failures, task.preemptions, task.node) == (TaskState.PENDING, 0, 1, "")
    assert task.reason == f"attempt 1 {WHY}; requeued"
    assert w.state.kills == {} and w.job().state is JobState.PENDING


def test_the_next_launch_carries_the_preemption_and_the_reason_stays() -> None:
    w = preempted_world()
    w.do(Reports("n1", (ended(TaskState.KILLED, code=None),), 1))
    step = w.do(Place(((T, "n2"),)))
    launch = next(a for a in step.actions if isinstance(a, Launch))
    assert (launch.attempt, launch.preemptions) == (2, 1)
    assert WHY in w.task().reason


def test_a_task_that_finishes_during_the_grace_succeeds() -> None:
    w = preempted_world()
    w.do(Reports("n1", (ended(TaskState.SUCCEEDED),), 1))
    assert w.task().state is TaskState.SUCCEEDED and w.task().preemptions == 0


def test_on_preempt_cancel_cancels_the_job() -> None:
    w = preempted_world(on_preempt="cancel")
    w.do(Reports("n1", (ended(TaskState.KILLED, code=None),), 1))
    assert w.task().state is TaskState.KILLED and "--on-preempt cancel" in w.task().reason
    assert w.job().cancelled and w.job().state is JobState.CANCELLED


def test_a_node_lost_mid_preemption_requeues_once_a_job_with_retries() -> None:
    """The cut-off agent fences a job with retries before the lost timeout: requeued."""
    w = preempted_world(retries=1)
    w.do(AgentLeft("n1"), at=1.0)
    w.do(Tick(), at=100.0)                      # past node + lost timeouts
    assert (w.task().state, w.task().preemptions, w.task().failures) == (TaskState.PENDING, 1, 0)
    assert w.state.kills == {}
    late = w.do(Reports("n1", (ended(TaskState.KILLED, code=None),), 2))   # a late word from the old attempt
    assert late.tasks == {} and w.task().preemptions == 1


def test_a_node_lost_mid_preemption_keeps_a_job_without_retries_until_the_stop_is_confirmed() -> None:
    """Issue 36 #1: no agent fences a job without retries, so its copy may still run on the
    silent node; it is not requeued (two copies ran in the review) until the node says it
    ended, or an admin declares the machine dead."""
    w = preempted_world(retries=0)
    w.do(AgentLeft("n1"), at=1.0)
    for at in (100.0, 200.0):                   # past node + lost timeouts, and again: once
        step = w.do(Tick(), at=at)
    task = w.task()
    assert (task.state, task.node, task.preemptions) == (TaskState.RUNNING, "n1", 0)
    assert task.reason == f"{WHY}; {unconfirmed_reason('n1')}" and step.tasks == {}
    assert (T, 1) in w.state.kills                # sent again when n1's stream is back
    w.do(Forget(("n1",), "admin", "burnt"), at=201.0)
    task = w.task()
    assert (task.state, task.node, task.preemptions, task.failures) == (TaskState.PENDING, "", 1, 0)
    assert w.state.kills == {}


def test_forget_refuses_a_connected_node_and_ends_plain_tasks_lost() -> None:
    w = running_world(0)
    with pytest.raises(FailedPrecondition, match="'n1' is connected"):
        w.do(Forget(("n1",), "admin"))
    w.do(AgentLeft("n1"), at=1.0)
    w.do(Forget(("n1",), "admin", "burnt"), at=2.0)
    assert (w.task().state, w.task().reason) == (TaskState.LOST, "node n1 declared dead by admin (burnt)")


def test_re_registration_resends_the_kill_with_its_grace_and_missing_means_preempted() -> None:
    w = preempted_world()
    w.do(AgentLeft("n1"))
    step = w.join("n1", running=((T, 1),))
    welcome = next(a for a in step.actions if hasattr(a, "kills"))
    assert [(k.task_id, k.grace_s) for k in welcome.kills] == [(T, 7.0)]
    w.do(AgentLeft("n1"))
    w.join("n1", running=())                   # the agent restarted: the attempt is gone
    assert (w.task().state, w.task().preemptions) == (TaskState.PENDING, 1)


def test_a_second_preempt_of_the_same_attempt_changes_nothing() -> None:
    w = preempted_world()
    again = w.do(Preempt(((T, 1, "again", "x"),)))
    assert not again.kills_put and not again.actions


def test_a_stale_victim_is_skipped() -> None:
    w = running_world()
    step = w.do(Preempt(((T, 9, WHY, "other"),)))
    assert not step.kills_put and not step.actions


def test_cancel_after_preempt_ends_it_killed() -> None:
    from tcluster.master.core.events import Cancel
    w = preempted_world()
    w.do(Cancel(J))
    w.do(Reports("n1", (ended(TaskState.KILLED, code=None),), 1))
    assert w.task().state is TaskState.KILLED and w.job().state is JobState.CANCELLED


def test_submit_keeps_on_preempt() -> None:
    w = World()
    w.join("n1")
    w.do(Submit(J, replace(spec(), on_preempt="cancel")))
    assert w.job().spec.on_preempt == "cancel"
