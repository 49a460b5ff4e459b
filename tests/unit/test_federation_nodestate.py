"""Issue 35: federated placement respects the node's state. A pinned task (a GM's Place)
and a GM preemption's victims' room go only to schedulable nodes: READY and connected, not
cordoned, draining, drained or in maintenance (master/core/pinning.py pinnable, the LM's
check in federation/lm.py)."""

from __future__ import annotations

from typing import Callable

import pytest

from tcluster.domain.model import JobSpec
from tcluster.domain.resources import Resources
from tcluster.federation.messages import (
    Inconsistent, InternalLaunch, PreemptAndLaunch, RepartitionAndLaunch, TaskLaunched, TaskRequest, Why,
)
from tcluster.master.core.events import AgentLeft, Cordon, Drain, Launch as LaunchAction, Maintain, SubmitPinned, Tick
from tcluster.master.core.pinning import FEDERATION_OWNER, pinnable, pinned_round
from tcluster.master.features.federation_lm import FederationLM, fed_labels, res_of
from tests.unit.test_master_transitions import World


def pinned_spec(node_name: str, cpu: float, task_id: str) -> JobSpec:
    return JobSpec(("sleep", "9"), Resources(cpu, 2**20), owner=FEDERATION_OWNER,
                   labels=fed_labels(0, task_id, "a", node_name))


def ready(w: World) -> None:
    pass


def cordoned(w: World) -> None:
    w.do(Cordon(("n1",), "admin"))


def draining(w: World) -> None:
    # A task keeps the drain from completing: the node stays DRAINING.
    w.do(SubmitPinned("busy0001", pinned_spec("n1", 1, "f0-9.0"), "n1"))
    w.do(Drain(("n1",), "admin"))


def drained(w: World) -> None:
    w.do(Drain(("n1",), "admin"))
    w.do(Tick(), at=1.0)


def in_maintenance(w: World) -> None:
    w.do(Maintain(("n1",), "admin", start=1000.0, duration_s=3600))
    w.do(Tick(), at=1.0)


def disconnected(w: World) -> None:
    w.do(AgentLeft("n1"))


# (how the node got there, whether a pinned task may start there)
NODE_STATES: list[tuple[Callable[[World], None], bool]] = [
    (ready, True), (cordoned, False), (draining, False), (drained, False), (in_maintenance, False),
    (disconnected, False),
]


def world(setup: Callable[[World], None]) -> World:
    w = World()
    w.join("n1")
    w.join("n2")
    setup(w)
    return w


@pytest.mark.parametrize("setup,schedulable", NODE_STATES, ids=[s.__name__ for s, _ in NODE_STATES])
def test_a_pinned_task_starts_only_on_a_schedulable_node_and_waits_otherwise(
        setup: Callable[[World], None], schedulable: bool) -> None:
    w = world(setup)
    assert pinnable(w.state, "n1") is schedulable
    step = w.do(SubmitPinned("aaaa0001", pinned_spec("n1", 1, "f0-1.0"), "n1"))
    launched = [a.node for a in step.actions if isinstance(a, LaunchAction)]
    assert launched == (["n1"] if schedulable else [])
    if schedulable:
        return
    pinned, places, reasons = pinned_round(w.state)
    assert "aaaa0001" in pinned and places == []          # never n2 either: the GM chose n1
    assert "schedulable" in reasons["aaaa0001"]


def live_lm(w: World) -> FederationLM:
    fed = FederationLM(0, "lm0", 1, lambda n: res_of(w.state.free(n)) if pinnable(w.state, n) else (0, 0), 0,
                       schedulable=lambda n: pinnable(w.state, n))
    fed.sync(w.state.nodes, lambda: (), 1, force=True)
    return fed


@pytest.mark.parametrize("setup,schedulable", NODE_STATES, ids=[s.__name__ for s, _ in NODE_STATES])
def test_the_lm_places_and_preempts_only_on_a_schedulable_node(setup: Callable[[World], None],
                                                                schedulable: bool) -> None:
    w = world(setup)
    fed = live_lm(w)
    n1 = fed.live.index("n1")
    epoch = fed.live.epoch
    # A victim (another GM's task) holds all of n1: preempting it would make the room.
    fed.check.adopt(TaskRequest("f0-7.0", "b", (4000, 8192)), 0, n1, logical=False)
    fed.check.free[n1] = (0, 0)
    big = TaskRequest("f0-8.0", "a", (4000, 1024))
    answer, _ = fed.check.handle(PreemptAndLaunch("r:p", 0, epoch, n1, ("f0-7.0",), big))
    assert isinstance(answer, TaskLaunched) is schedulable
    if not schedulable:
        assert isinstance(answer, Inconsistent) and answer.why is Why.INSUFFICIENT
        assert "f0-7.0" in fed.check.running          # the victim was not stopped for nothing
    small = TaskRequest("f0-6.0", "a", (1, 1))
    answer, _ = fed.check.handle(InternalLaunch("r:l", 0, epoch, n1, small))
    if not schedulable:
        assert isinstance(answer, Inconsistent) and answer.why is Why.INSUFFICIENT


def test_a_repartition_onto_an_unschedulable_node_is_refused_even_with_room_in_the_books() -> None:
    w = world(cordoned)
    fed = FederationLM(0, "lm0", 2, lambda n: (4000, 8192), 0, schedulable=lambda n: pinnable(w.state, n))
    fed.sync(w.state.nodes, lambda: (), 1, force=True)
    n1 = fed.live.index("n1")
    owner = fed.live.layout.owner[n1]
    answer, _ = fed.check.handle(RepartitionAndLaunch("r:x", 1 - owner, fed.live.epoch, owner, n1,
                                                      TaskRequest("f1-1.0", "a", (1, 1))))
    assert isinstance(answer, Inconsistent) and answer.why is Why.INSUFFICIENT


def test_the_lm_state_names_closed_nodes_and_the_gm_seeks_no_victims_there() -> None:
    """A GM's Alg. 2 must not keep asking for a preemption the LM refuses: the LM's state
    lists the nodes that take no new task, and the GM looks for victims elsewhere."""
    from tcluster.federation.fairness import FairPreempter
    from tcluster.federation.gm import GlobalManager, Send
    from tcluster.federation.lm import LocalManager
    from tcluster.federation.messages import LMLayout, LMNode
    layout = LMLayout(0, (LMNode((4, 100), 0), LMNode((4, 100), 0)), (1, 1))      # both GM 1's
    closed = {0}                                                                  # node 0 draining
    lm = LocalManager(layout, publish_tasks=True, schedulable=lambda i: i not in closed)
    for tid, node, cores in (("h1", 0, 4), ("h2", 1, 2), ("h3", 1, 2)):
        answer, _ = lm.handle(InternalLaunch(f"{tid}:0", 1, 1, node, TaskRequest(tid, "hog", (cores, 1))))
        assert isinstance(answer, TaskLaunched) or node in closed
    lm.adopt(TaskRequest("h1", "hog", (4, 1)), 1, 0, logical=False)           # it ran before the drain
    assert lm.state().closed == (0,)
    gm = GlobalManager(0, [layout], 2, ["mine"], preempter=FairPreempter({"mine": 0.5, "hog": 0.1}))
    gm.on_state(lm.state())
    gm.submit(TaskRequest("x", "mine", (4, 1)))
    d = gm.decide()
    # Node 0 needs one victim (h1), node 1 two: node 0 is closed, so node 1's two.
    assert isinstance(d, Send) and isinstance(d.request, PreemptAndLaunch)
    assert (d.request.node, sorted(d.request.victims)) == (1, ["h2", "h3"])
    answer, _ = lm.handle(d.request)
    assert isinstance(answer, TaskLaunched)


def test_closed_nodes_travel_the_wire() -> None:
    from tcluster.federation.messages import LMState
    from tcluster.gm.wire import state_from
    from tcluster.master.edge.federation_api import state_pb
    state = LMState(0, 3, 9, ((1, 1), (0, 0), (2, 2)), closed=(1,))
    assert state_from(state_pb(state)).closed == (1,)
