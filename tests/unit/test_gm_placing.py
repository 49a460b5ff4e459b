"""tcl-gm's placing (gm/placing.py) without I/O: which LM states an answer may bring into
the pure GM's views, and the order in which an LM's masters are tried."""

from __future__ import annotations

from types import SimpleNamespace

import grpc

from tcluster.federation.messages import TaskLaunched, LMLayout, LMState
from tcluster.gm.links import LMLink
from tcluster.gm.placing import Placer
from tcluster.gm.wire import Layout
from tcluster.daemonkit.leaders import LEADER_METADATA


def answer_at(epoch: int) -> TaskLaunched:
    return TaskLaunched("t:0", "t", 0, 0, LMState(0, epoch, 7, ((4, 100),)), False)


def placer_with(link: LMLink) -> Placer:
    return Placer(SimpleNamespace(links=[link]), lambda task_id: False)    # type: ignore[arg-type]


def test_an_answers_state_reaches_only_a_view_placed_on_of_the_same_epoch() -> None:
    layout = Layout(name="lm0", epoch=3, gms=1, names=(), words=(), pure=LMLayout(0, (), ()))
    link = LMLink("lm0", ["127.0.0.1:1"], layout=layout, usable=True)
    kept, _ = placer_with(link)._checked(0, answer_at(3), "j")
    assert kept.state.version == 7
    for epoch, usable in ((2, True), (3, False)):
        # Another epoch; or an LM not placed on, whose view in the pure GM is a placeholder
        # with no nodes (Alg. 2 would index its nodes by the state's tasks).
        link.usable = usable
        blank, _ = placer_with(link)._checked(0, answer_at(epoch), "j")
        assert blank.state == LMState(0, 0, -1, ()) and blank.task_id == "t"


class Refusal:
    """What LMLink.follow reads of a grpc.aio error: a standby's UNAVAILABLE naming the leader."""

    def __init__(self, leader: str) -> None:
        self.leader = leader

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((LEADER_METADATA, self.leader),)

    def details(self) -> str:
        return "this master is a standby"


def test_an_lms_masters_are_toured_leader_first_and_a_standbys_hint_is_followed_within_the_list() -> None:
    link = LMLink("lm0", ["a:1", "b:1", "c:1"], addr="b:1")
    tour = link.tour()
    seen = []
    for addr in tour:
        seen.append(addr)
        if addr == "b:1":                           # the old leader is a standby now: c leads
            link.follow(tour, Refusal("c:1"))       # type: ignore[arg-type]
    assert seen == ["b:1", "c:1", "a:1"]
    assert list(link.tour(leader_first=False)) == ["a:1", "b:1", "c:1"]
    tour, seen = link.tour(leader_first=False), []
    for addr in tour:                               # a hint outside --lms: no credentials, not dialled
        seen.append(addr)
        link.follow(tour, Refusal("elsewhere:1"))   # type: ignore[arg-type]
    assert seen == ["a:1", "b:1", "c:1"]
