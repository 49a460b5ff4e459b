"""A node can only speak for its own tasks: a report about a task placed on another node
changes nothing, not even the kill intent the master keeps for that task (else n2 could
tell the master that n1's cancelled task ended, and n1 would never be told to kill it)."""

from __future__ import annotations

from tcluster.master.core.events import Cancel, Reports
from tcluster.domain.model import TaskState
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
