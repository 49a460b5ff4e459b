"""A node can only speak for its own tasks: a report about a task placed on another node
changes nothing, not even the kill intent the master keeps for that task (else n2 could
tell the master that n1's cancelled task ended, and n1 would never be told to kill it)."""

from __future__ import annotations

from tcluster.master.core.events import Cancel, Reports
from tcluster.domain.model import TaskState
from tcluster.domain.reports import TaskReport
from tests.unit.test_master_transitions import J, T, ended, running_world


def test_another_nodes_report_keeps_the_kill_intent_and_the_task() -> None:
    w = running_world()
    w.do(Cancel(J))
    assert (T, 1) in w.state.kills
    step = w.do(Reports("n2", (ended(TaskState.KILLED, code=None),), 1))
    assert not step.tasks and not step.kills_del and (T, 1) in w.state.kills
    assert w.task().state is TaskState.RUNNING
    w.do(Reports("n1", (ended(TaskState.KILLED, code=None),), 2))     # the node that runs it
    assert w.task().state is TaskState.KILLED and not w.state.kills


def _fenced(reason: str = "cut off from the master for 9s; the task may run elsewhere") -> TaskReport:
    return TaskReport(T, 1, TaskState.KILLED, exit_code=None, signal=9, reason=reason, at=5.0)


def test_a_fenced_end_nobody_asked_for_is_a_lost_attempt_that_retries() -> None:
    """The agent (or a shim with no agent) killed the attempt of a job with retries because
    it lost the master: the master re-places it as after its own LOST, not ends it KILLED."""
    w = running_world(retries=2)
    w.do(Reports("n1", (_fenced(),), 2))
    task = w.task()
    assert (task.state, task.failures, task.node) == (TaskState.PENDING, 1, "")
    assert "attempt 1 LOST: cut off from the master" in task.reason


def test_a_fenced_end_with_no_retry_left_ends_lost_and_a_cancel_still_ends_killed() -> None:
    w = running_world(retries=0)
    w.do(Reports("n1", (_fenced("fenced by the task's shim"),), 2))
    assert (w.task().state, w.task().reason) == (TaskState.LOST, "fenced by the task's shim")
    w = running_world(retries=2)
    w.do(Cancel(J))
    w.do(Reports("n1", (ended(TaskState.KILLED, code=None),), 2))
    assert w.task().state is TaskState.KILLED
