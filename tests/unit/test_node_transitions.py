"""Node operations in the master's transitions, as tables: an operator's event (or a tick)
on a node in a given operator state -> its state after, who/when/why, whether placement may
use it, and what is killed. A drain's deadline takes the preemption path (a REQUEUE kill
with the preemption grace; the end requeues without a retry). The state survives agent
re-registration and a master restart (a state rebuilt from the rows written)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tcluster.domain.errors import InvalidArgument, NotFound
from tcluster.master.core.events import (
    AgentLeft, Cordon, Drain, Kill, KillMode, Maintain, Place, Reports, Tick, Uncordon,
)
from tcluster.master.core.state import MasterState, Timeouts
from tcluster.domain.model import NodeState, TaskState
from tcluster.domain.nodeorders import NodeOps, blocks, ops_from_json, ops_to_json, shown_state
from tests.unit.test_master_transitions import J, T, World, ended, running_world

S = NodeState
WALL0 = 1000.0          # World's wall clock is 1000 + its monotonic time


def ops(w: World, node: str = "n1") -> NodeOps:
    return w.state.nodes[node].ops


def schedulable(w: World, node: str = "n1") -> bool:
    view = w.state.matrix.view()
    return bool(view.schedulable[view.rows[node]])


def idle_world() -> World:
    w = World()
    w.join("n1")
    w.join("n2")
    return w


def world_in(state: NodeState, with_task: bool) -> World:
    """n1 in an operator state; with_task: a task of job J runs there."""
    w = running_world() if with_task else idle_world()
    if state is S.CORDONED:
        w.do(Cordon(("n1",), "alice", "disk"))
    elif state in (S.DRAINING, S.DRAINED):
        w.do(Drain(("n1",), "alice", "kernel"))
    elif state is S.MAINT:
        w.do(Maintain(("n1",), "alice", WALL0 + w.mono, 60.0, "ups"))
    assert ops(w).state is state
    return w


# event, from state, a task there -> the state after (and who it names)
@pytest.mark.parametrize("event,before,task,after,by", [
    (Cordon(("n1",), "bob", "why"), S.READY, False, S.CORDONED, "bob"),
    (Cordon(("n1",), "bob", "why"), S.CORDONED, False, S.CORDONED, "alice"),    # the first cordon stands
    (Cordon(("n1",), "bob", "why"), S.DRAINING, True, S.DRAINING, "alice"),    # a cordon never cancels a drain
    (Cordon(("n1",), "bob", "why"), S.DRAINED, False, S.DRAINED, "alice"),
    (Cordon(("n1",), "bob", "why"), S.MAINT, False, S.CORDONED, "bob"),
    (Uncordon(("n1",), "bob"), S.CORDONED, False, S.READY, "bob"),
    (Uncordon(("n1",), "bob"), S.DRAINING, True, S.READY, "bob"),            # cancels the drain
    (Uncordon(("n1",), "bob"), S.DRAINED, False, S.READY, "bob"),
    (Uncordon(("n1",), "bob"), S.MAINT, False, S.READY, "bob"),              # ends the window
    (Drain(("n1",), "bob", "why"), S.READY, True, S.DRAINING, "bob"),
    (Drain(("n1",), "bob", "why"), S.READY, False, S.DRAINED, "bob"),        # nothing to wait for
    (Drain(("n1",), "bob", "why"), S.CORDONED, True, S.DRAINING, "bob"),
    (Drain(("n1",), "bob", "why"), S.DRAINED, False, S.DRAINED, "alice"),
    (Drain(("n1",), "bob", "why"), S.MAINT, False, S.DRAINED, "bob"),
])
def test_operator_events(event: object, before: NodeState, task: bool, after: NodeState, by: str) -> None:
    w = world_in(before, task)
    step = w.do(event, at=w.mono + 1)
    assert ops(w).state is after and ops(w).by == by
    assert schedulable(w) is (after is S.READY)
    assert schedulable(w, "n2")
    assert not [a for a in step.actions if isinstance(a, Kill)], "no operator event kills by itself"
    if task:
        assert w.task().state is TaskState.RUNNING


def test_who_when_why_are_recorded_and_uncordon_drops_the_window() -> None:
    w = idle_world()
    w.do(Maintain(("n1",), "ops", WALL0 + 100, 60, "ups swap"), at=5)
    assert (ops(w).state, ops(w).maint_start, ops(w).maint_end, ops(w).maint_by) == (S.READY, WALL0 + 100,
                                                                                    WALL0 + 160, "ops")
    w.do(Cordon(("n1",), "alice", "bad disk"), at=7)
    assert (ops(w).by, ops(w).at, ops(w).reason) == ("alice", WALL0 + 7, "bad disk")
    w.do(Uncordon(("n1",), "bob", "disk replaced"), at=9)
    assert ops(w).state is S.READY and not ops(w).has_window
    assert (ops(w).by, ops(w).at, ops(w).reason) == ("bob", WALL0 + 9, "disk replaced")


@pytest.mark.parametrize("event,error", [
    (Cordon(("n1", "nope"), "a"), NotFound),
    (Drain((), "a"), InvalidArgument),
    (Drain(("n1",), "a", deadline_s=-1), InvalidArgument),
    (Maintain(("n1",), "a", WALL0 - 100, 50), InvalidArgument),     # already over
    (Maintain(("n1",), "a", WALL0, 0), InvalidArgument),
    (Maintain(("n1",), "a", float("nan"), 60), InvalidArgument),
    (Drain(("n1",), "a", deadline_s=float("inf")), InvalidArgument),
])
def test_bad_requests_change_nothing(event: object, error: type) -> None:
    w = idle_world()
    with pytest.raises(error):
        w.do(event)
    assert ops(w).state is S.READY and ops(w, "n2").state is S.READY


def test_a_drain_becomes_drained_when_its_last_task_ends() -> None:
    w = world_in(S.DRAINING, with_task=True)
    w.do(Tick(), at=2)
    assert ops(w).state is S.DRAINING
    w.do(Reports("n1", (ended(TaskState.SUCCEEDED),), 2), at=3)
    step = w.do(Tick(), at=4)
    assert ops(w).state is S.DRAINED and ops(w).at == WALL0 + 4 and ops(w).since == WALL0
    assert "n1" in step.nodes, "DRAINED is written"
    assert w.task().state is TaskState.SUCCEEDED, "a task that ends before the deadline is untouched"


def test_at_the_deadline_the_rest_takes_the_preemption_path_without_a_retry() -> None:
    w = running_world(retries=0)
    w.state.timeouts = Timeouts(**{**w.state.timeouts.__dict__, "preempt_grace_s": 3.0})
    w.do(Drain(("n1",), "alice", "kernel", deadline_s=4), at=1)
    assert ops(w).deadline == WALL0 + 5
    assert not [a for a in w.do(Tick(), at=4).actions if isinstance(a, Kill)]
    step = w.do(Tick(), at=5)
    why = "drained: node n1 (kernel) reached its deadline"
    assert Kill("n1", T, 1, why, 3.0) in step.actions
    assert step.kills_put[(T, 1)].mode is KillMode.REQUEUE
    assert not [a for a in w.do(Tick(), at=6).actions if isinstance(a, Kill)], "one kill per attempt"
    w.do(Reports("n1", (ended(TaskState.KILLED, code=None),), 3), at=7)
    task = w.task()
    assert (task.state, task.failures, task.preemptions) == (TaskState.PENDING, 0, 1)
    assert why in task.reason
    w.do(Tick(), at=8)
    assert ops(w).state is S.DRAINED
    w.do(Place(((T, "n2"),)), at=9)
    assert w.task().node == "n2"


def test_a_deadline_while_the_node_is_away_is_sent_when_it_returns() -> None:
    w = running_world()
    w.do(Drain(("n1",), "alice", deadline_s=5), at=1)
    w.do(AgentLeft("n1"), at=2)
    step = w.do(Tick(), at=7)
    assert (T, 1) in step.kills_put and not [a for a in step.actions if isinstance(a, Kill)]
    welcome = next(a for a in w.join("n1", running=((T, 1),), at=8).actions if hasattr(a, "kills"))
    assert [k.task_id for k in welcome.kills] == [T]   # type: ignore[attr-defined]


def test_the_operator_state_survives_registration_and_a_master_restart() -> None:
    w = world_in(S.DRAINING, with_task=True)
    w.do(Drain(("n1",), "alice", "kernel", deadline_s=8), at=1)
    w.do(AgentLeft("n1"), at=2)
    w.join("n1", running=((T, 1),), at=3)
    assert ops(w).state is S.DRAINING and not schedulable(w)
    # A master restart: the state rebuilt from the rows (nodes keep their ops; the codec round-trips)
    nodes = [replace(n, ops=ops_from_json(ops_to_json(n.ops))) for n in w.state.nodes.values()]
    tasks = [t for ts in w.state.tasks.values() for t in ts]
    w.state = MasterState(list(w.state.jobs.values()), tasks, nodes, [], w.state.timeouts, started_mono=w.mono)
    assert ops(w).deadline == WALL0 + 9 and "n1" in w.state.operated
    w.join("n1", running=((T, 1),), at=4)
    assert ops(w).state is S.DRAINING and not schedulable(w)
    assert not any(isinstance(a, Kill) for a in w.do(Tick(), at=8).actions)
    step = w.do(Tick(), at=9)
    assert any(isinstance(a, Kill) and a.task_id == T for a in step.actions), "the deadline holds"


def test_a_window_opens_and_closes_with_the_tick() -> None:
    w = idle_world()
    w.do(Maintain(("n1",), "ops", WALL0 + 3, 5, "ups"), at=1)
    assert ops(w).state is S.READY and schedulable(w)
    w.do(Tick(), at=3)
    assert (ops(w).state, ops(w).by, ops(w).reason) == (S.MAINT, "ops", "ups") and not schedulable(w)
    w.do(Tick(), at=8)
    assert ops(w).state is S.READY and not ops(w).has_window and schedulable(w)
    assert "n1" not in w.state.operated


def test_a_cordon_asked_during_a_window_outlives_it() -> None:
    w = idle_world()
    w.do(Maintain(("n1",), "ops", WALL0, 6), at=0)
    assert ops(w).state is S.MAINT
    w.do(Cordon(("n1",), "alice", "still broken"), at=5)
    w.do(Tick(), at=7)
    assert ops(w).state is S.CORDONED and not ops(w).has_window


@pytest.mark.parametrize("now,limit,blocked", [
    (0, 0, True),          # no time limit: any window not yet over blocks
    (0, 50, False),        # ends before the window opens
    (0, 150, True),        # would overlap
    (120, 10, True),       # inside the window
    (210, 0, False),       # the window is over
])
def test_a_window_blocks_what_would_overlap_it(now: float, limit: float, blocked: bool) -> None:
    window = NodeOps(maint_start=100, maint_end=200)
    assert blocks(window, now, limit) is blocked


def test_shown_state_down_wins_and_the_codec_round_trips() -> None:
    drained = NodeOps(S.DRAINED, "alice", 5.0, "kernel", 0.0, 1.0)
    assert shown_state(S.READY, drained, connected=True) is S.DRAINED
    assert shown_state(S.DOWN, drained, connected=False) is S.DOWN
    assert ops_to_json(NodeOps()) == "" and ops_from_json("") == NodeOps()
    assert ops_from_json(ops_to_json(drained)) == drained
    assert ops_from_json('{"state":"WEIRD","future":1}').state is S.CORDONED, "unknown: the safe side"
