"""tcl-gm's placing (gm/placing.py) without I/O: which LM states an answer may bring into
the pure GM's views."""

from __future__ import annotations

from types import SimpleNamespace

from tcluster.federation.messages import Launched, LMLayout, LMState
from tcluster.gm.daemon import LMLink
from tcluster.gm.placing import Placer
from tcluster.gm.wire import Layout


def answer_at(epoch: int) -> Launched:
    return Launched("t:0", "t", 0, 0, LMState(0, epoch, 7, ((4, 100),)), False)


def placer_with(link: LMLink) -> Placer:
    return Placer(SimpleNamespace(links=[link]))    # type: ignore[arg-type]


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
