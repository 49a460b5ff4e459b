"""Megha's LM (federation/lm.py): the check-and-commit table, task ends and per-GM deltas."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tcluster.federation.gm import GlobalManager, Send
from tcluster.federation.lm import LocalManager
from tcluster.federation.messages import (
    Inconsistent, InconsistencyKind, InternalLaunch, TaskLaunched, LMLayout, LMNode, PreemptAndLaunch, Refused, RepartitionAndLaunch,
    TaskRequest, Why,
)

A = 1

# Node 0 (GM 0's): 4 cores with constraint A. Node 1 (GM 1's): 8 cores, no constraint.
LAYOUT = LMLayout(7, (LMNode((4, 100), A), LMNode((8, 100), 0)), (0, 1))


def t(tid: str = "t", cores: int = 2, pc: int = 0, queue: str = "q0") -> TaskRequest:
    return TaskRequest(tid, queue, (cores, 10), pc)


def fresh() -> LocalManager:
    lm = LocalManager(LAYOUT, epoch=3)
    # Node 0 already runs 3 of its 4 cores for GM 0; node 1 runs 6 of 8 for GM 1.
    lm.handle(InternalLaunch("pre0:0", 0, 3, 0, t("pre0", 3)))
    lm.handle(InternalLaunch("pre1:0", 1, 3, 1, t("pre1", 6, queue="q1")))
    return lm


# (name, request, expected answer type, kind, why, launched on node)
TABLE = [
    ("fits", InternalLaunch("a:0", 0, 3, 0, t("a", 1, A)), TaskLaunched, None, None, 0),
    ("insufficient", InternalLaunch("a:0", 0, 3, 0, t("a", 2)), Inconsistent, InconsistencyKind.INTERNAL, Why.INSUFFICIENT, None),
    ("constraint unmet", InternalLaunch("a:0", 1, 3, 1, t("a", 1, A)), Inconsistent, InconsistencyKind.INTERNAL, Why.INSUFFICIENT, None),
    ("not in the GM's partition", InternalLaunch("a:0", 0, 3, 1, t("a", 1)), Inconsistent, InconsistencyKind.INTERNAL,
     Why.NOT_IN_PARTITION, None),
    ("unknown node", InternalLaunch("a:0", 0, 3, 9, t("a", 1)), Inconsistent, InconsistencyKind.INTERNAL, Why.UNKNOWN_NODE, None),
    ("stale epoch", InternalLaunch("a:0", 0, 2, 0, t("a", 1)), Refused, None, None, None),
    ("repartition fits", RepartitionAndLaunch("a:0", 0, 3, 1, 1, t("a", 2)), TaskLaunched, None, None, 1),
    ("repartition insufficient", RepartitionAndLaunch("a:0", 0, 3, 1, 1, t("a", 3)), Inconsistent,
     InconsistencyKind.EXTERNAL, Why.INSUFFICIENT, None),
    ("repartition from the wrong partition", RepartitionAndLaunch("a:0", 0, 3, 1, 0, t("a", 1)), Inconsistent,
     InconsistencyKind.EXTERNAL, Why.NOT_IN_PARTITION, None),
    ("repartition of the GM's own node", RepartitionAndLaunch("a:0", 0, 3, 0, 0, t("a", 1)), Inconsistent,
     InconsistencyKind.EXTERNAL, Why.NOT_IN_PARTITION, None),
    ("repartition at a stale epoch", RepartitionAndLaunch("a:0", 0, 4, 1, 1, t("a", 1)), Refused, None, None, None),
    ("preempt fits", PreemptAndLaunch("a:0", 0, 3, 1, ("pre1",), t("a", 8)), TaskLaunched, None, None, 1),
    ("preempt insufficient", PreemptAndLaunch("a:0", 0, 3, 1, ("pre1",), t("a", 9)), Inconsistent,
     InconsistencyKind.EXTERNAL, Why.INSUFFICIENT, None),
    ("preempt a victim gone", PreemptAndLaunch("a:0", 0, 3, 1, ("nope",), t("a", 1)), Inconsistent,
     InconsistencyKind.EXTERNAL, Why.VICTIM_GONE, None),
    ("preempt a victim elsewhere", PreemptAndLaunch("a:0", 0, 3, 0, ("pre1",), t("a", 1)), Inconsistent,
     InconsistencyKind.INTERNAL, Why.VICTIM_GONE, None),
]


@pytest.mark.parametrize("name, req, answer_type, kind, why, node", TABLE, ids=[row[0] for row in TABLE])
def test_the_check_table(name, req, answer_type, kind, why, node) -> None:
    lm = fresh()
    before = (list(lm.free), lm.version)
    answer, _ = lm.handle(req)
    assert type(answer) is answer_type
    assert answer.request_id == req.request_id and answer.lm == 7 and answer.state == lm.state()
    if isinstance(answer, Inconsistent):
        assert (answer.kind, answer.why) == (kind, why)
    if node is None:
        assert (list(lm.free), lm.version) == before and "a" not in lm.running
    else:
        assert answer.node == node and lm.running["a"].node == node
        assert all(f >= 0 for free in lm.free for f in free)


@pytest.mark.parametrize("req", [row[1] for row in TABLE], ids=[row[0] for row in TABLE])
def test_a_duplicate_request_id_gets_the_first_answer_and_never_launches_twice(req) -> None:
    lm = fresh()
    first, _ = lm.handle(req)
    state = (list(lm.free), dict(lm.running), lm.version)
    again, notices = lm.handle(req)
    assert again is first and notices == ()
    assert (list(lm.free), dict(lm.running), lm.version) == state


def test_a_new_request_id_for_a_running_task_is_an_error_not_a_second_launch() -> None:
    lm = fresh()
    with pytest.raises(ValueError):
        lm.handle(InternalLaunch("pre0:1", 0, 3, 0, t("pre0", 1)))


def test_a_repartition_carves_a_logical_node_that_dissolves_at_the_end() -> None:
    lm = fresh()
    answer, _ = lm.handle(RepartitionAndLaunch("a:0", 0, 3, 1, 1, t("a", 2)))
    assert answer.logical and lm.free[1] == (0, 80)
    (logical,) = answer.state.logical
    assert (logical.phys, logical.cap, logical.owner, logical.task_id) == (1, (2, 10), 0, "a")
    gm, delta = lm.end("a")
    assert gm == 0 and delta.task_id == "a" and delta.node == 1 and delta.node_free == (2, 90)
    assert lm.state().logical == () and dict(lm.state().usage)["q0"] == (3, 10)


def test_a_preemption_stops_the_victims_and_tells_their_gm() -> None:
    lm = fresh()
    answer, notices = lm.handle(PreemptAndLaunch("a:0", 0, 3, 1, ("pre1",), t("a", 8)))
    assert answer.preempted == ("pre1",) and answer.logical
    ((gm, delta),) = notices
    assert gm == 1 and delta.preempted and delta.task_id == "pre1"
    assert "pre1" not in lm.running and lm.free[1] == (0, 90)


def test_task_end_deltas_carry_increasing_versions() -> None:
    lm = fresh()
    _, d0 = lm.end("pre0")
    _, d1 = lm.end("pre1")
    assert d0.version < d1.version == lm.version and d0.node_free == (4, 100)


def test_a_gm_refused_for_a_stale_epoch_adopts_the_new_one_and_retries_first() -> None:
    gm = GlobalManager(0, [replace(LAYOUT, lm=0)], 2, ["q0"])
    lm = LocalManager(replace(LAYOUT, lm=0), epoch=3)
    gm.on_state(lm.state())
    lm.fail_over()                                  # a standby took over: epoch 4
    gm.submit(t("a", 1))
    d = gm.decide()
    assert isinstance(d, Send) and d.request.epoch == 3
    answer, _ = lm.handle(d.request)
    assert isinstance(answer, Refused) and answer.epoch == 4
    gm.on_answer(answer)
    assert gm.stats.refused == 1 and gm.views[0].epoch == 4
    d = gm.decide()
    assert d.request.task.task_id == "a" and d.request.epoch == 4
    assert isinstance(lm.handle(d.request)[0], TaskLaunched)


def test_the_answer_memory_is_bounded_to_the_latest_requests() -> None:
    lm = LocalManager(LAYOUT, epoch=3, remember=2)
    for k in range(3):
        lm.handle(InternalLaunch(f"r{k}:0", 0, 3, 0, t(f"r{k}", 1)))
    assert list(lm.answers) == ["r1:0", "r2:0"]
    again, _ = lm.handle(InternalLaunch("r2:0", 0, 3, 0, t("r2", 1)))
    assert again is lm.answers["r2:0"]


# ---- a live LM checks against the master's real free room (master/features/federation_lm.py) ----

def live(room: dict[int, tuple[int, int]]) -> LocalManager:
    return LocalManager(LAYOUT, epoch=3, room=lambda node: room[node])


def test_the_real_room_wins_over_the_books_local_work_makes_a_fit_insufficient() -> None:
    room = {0: (4, 100), 1: (8, 100)}
    lm = live(room)
    room[0] = (0, 100)                       # a local job took node 0 (the LM's books never saw it)
    answer, _ = lm.handle(InternalLaunch("a:0", 0, 3, 0, t("a", 1)))
    assert isinstance(answer, Inconsistent) and (answer.kind, answer.why) == (InconsistencyKind.INTERNAL, Why.INSUFFICIENT)
    assert answer.state.free[0] == (0, 100)      # the published room is the real one
    room[0] = (4, 100)                       # the local job ended
    lm.touch()
    assert lm.state().free[0] == (4, 100)
    assert isinstance(lm.handle(InternalLaunch("a:1", 0, 3, 0, t("a", 1)))[0], TaskLaunched)


def test_repartition_and_preempt_check_the_real_room_too() -> None:
    room = {0: (4, 100), 1: (1, 100)}
    lm = live(room)
    answer, _ = lm.handle(RepartitionAndLaunch("a:0", 0, 3, 1, 1, t("a", 2)))
    assert isinstance(answer, Inconsistent) and answer.why is Why.INSUFFICIENT
    lm.adopt(t("v", 2, queue="q1"), 1, 1, logical=False)
    room[1] = (1, 90)                        # the victim's room is still held in the real state
    answer, notices = lm.handle(PreemptAndLaunch("b:0", 0, 3, 1, ("v",), t("b", 3)))
    assert isinstance(answer, TaskLaunched) and answer.logical and [gm for gm, _ in notices] == [1]


def test_adopted_tasks_are_running_with_their_usage_and_logical_nodes() -> None:
    lm = live({0: (4, 100), 1: (8, 100)})
    lm.adopt(t("x", 2), 0, 1, logical=True)
    state = lm.state()
    assert lm.running["x"].node == 1 and dict(state.usage)["q0"] == (2, 10)
    assert [(n.phys, n.owner, n.task_id) for n in state.logical] == [(1, 0, "x")]
    gm, delta = lm.end("x")
    assert gm == 0 and delta.node_free == (8, 100) and lm.state().logical == ()
