"""The LoTES book in the live master follows applied steps: a task that starts holding
resources on a node is `started` once, one that stops (ends, is requeued or retried, is
LOST) is `ended` once; nothing else touches the book."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tcluster.domain.launch import Launch
from tcluster.master.core.actions import BinTarget, TaskReport
from tcluster.master.core.events import Cancel, Place, Reports, Step, Submit, Tick, Beat, Welcome
from tcluster.master.core.feed import AppliedStep
from tcluster.master.features.lotes_live import LotesLive, RequestWindow, book_moves
from tcluster.domain.model import Task, TaskState
from tcluster.domain.resources import Resources
from tcluster.scheduler.lotes.dispatch import LotesBook
from tcluster.scheduler.lotes.model import JobClass
from tcluster.scheduler.lotes.resolve import Outcome, plan_for
from tcluster.master.core.usageblock import EMPTY
from tests.unit.test_master_transitions import J, T, World, ended, spec


class RecordingBook(LotesBook):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, int]] = []

    def started(self, node: str, k: int) -> None:
        self.calls.append(("started", node, k))
        super().started(node, k)

    def ended(self, node: str, k: int) -> None:
        self.calls.append(("ended", node, k))
        super().ended(node, k)


class FakeMaster:
    """The MasterPort a LotesLive reads and asks (master/ports.py), over a World."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.sent: list[object] = []
        self.kicks = 0

    @property
    def state(self):  # type: ignore[no-untyped-def]
        return self.world.state

    def clock(self) -> float:
        return 1000.0

    def monotonic(self) -> float:
        return self.world.mono

    def broadcast(self, message_for) -> None:  # type: ignore[no-untyped-def]
        self.sent.extend(message_for(node) for node in self.world.state.nodes)

    def kick(self) -> None:
        self.kicks += 1


class LotesWorld(World):
    """A World whose steps also feed a LotesLive, as MasterService._do does."""

    def __init__(self) -> None:
        super().__init__()
        self.book = RecordingBook()
        self.lotes = LotesLive(FakeMaster(self), self.book, classes_text="x", classes_source="test")  # type: ignore[arg-type]
        self.join("n1")
        self.join("n2")
        nodes = [(n, Resources(4, 2**33), {}) for n in ("n1", "n2")]
        classes = [JobClass("small", (1.0, float(2**20)), 0.5), JobClass("big", (3.0, float(2**30)), 0.5)]
        outcome = plan_for(nodes, ("cpu", "memory"), classes)
        assert outcome.plan is not None
        self.lotes.adopt(outcome, "test", 0.01)
        self.book.calls.clear()

    def do(self, event: object, at: float | None = None) -> Step:
        if at is not None:
            self.mono = at
        from tcluster.master.core.events import Now
        from tcluster.master.core.transitions import handle
        now = Now(1000.0 + self.mono, self.mono)
        step = handle(self.state, event, now)  # type: ignore[arg-type]
        before = {task_id: self.state.task(task_id) for task_id in step.tasks}
        moved = frozenset(n for n, live in step.live.items() if live.connected != self.state.connected(n))
        self.state.apply(step)
        self.lotes.on_step(AppliedStep(event, step, now, None, before, moved))  # type: ignore[arg-type]
        return step


def _w(retries: int = 0) -> LotesWorld:
    w = LotesWorld()
    w.do(Submit(J, spec(retries)))
    w.do(Place(((T, "n1"),)))
    return w


def test_a_placement_starts_once_and_running_changes_nothing() -> None:
    w = _w()
    assert w.book.calls == [("started", "n1", 0)]
    w.do(Reports("n1", (TaskReport(T, 1, TaskState.RUNNING, at=1.0),), 1))
    w.do(Reports("n1", (TaskReport(T, 1, TaskState.RUNNING, at=1.0),), 2))   # a repeat
    w.do(Beat("n1", Resources(3, 2**33), EMPTY))
    assert w.book.calls == [("started", "n1", 0)] and list(w.book.running["n1"]) == [1, 0]


@pytest.mark.parametrize("state", [TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED])
def test_an_end_is_taken_once_and_stale_reports_do_not_count(state: TaskState) -> None:
    w = _w()
    w.do(Reports("n1", (ended(state, code=1),), 3))
    w.do(Reports("n1", (ended(state, code=1),), 4))            # after the end
    w.do(Reports("n2", (ended(state, code=1),), 1))            # another node
    assert w.book.calls == [("started", "n1", 0), ("ended", "n1", 0)]
    assert list(w.book.running["n1"]) == [0, 0]


def test_a_requeue_and_a_retry_elsewhere_end_then_start() -> None:
    w = _w(retries=1)
    w.do(Reports("n1", (replace(ended(TaskState.FAILED), rejected=True, reason="full"),), 1))   # refused: requeued
    assert w.task().state is TaskState.PENDING
    w.do(Place(((T, "n2"),)))
    w.do(Reports("n2", (ended(TaskState.FAILED, attempt=2, code=3),), 1))    # failed: retried
    assert w.task().state is TaskState.PENDING
    assert w.book.calls == [("started", "n1", 0), ("ended", "n1", 0), ("started", "n2", 0), ("ended", "n2", 0)]


def test_lost_tasks_leave_the_book_once() -> None:
    w = _w(retries=0)
    w.do(Beat("n2", Resources(4, 2**33), EMPTY), at=9)
    w.do(Tick(), at=10.5)                                      # n1 DOWN: still holding
    assert w.book.calls == [("started", "n1", 0)]
    w.do(Tick(), at=31)                                        # LOST
    w.do(Tick(), at=40)
    assert w.task().state is TaskState.LOST
    assert w.book.calls == [("started", "n1", 0), ("ended", "n1", 0)]


def test_cancel_ends_when_the_kill_is_reported() -> None:
    w = _w()
    w.do(Cancel(J))
    assert w.book.calls == [("started", "n1", 0)]
    w.do(Reports("n1", (ended(TaskState.KILLED),), 5))
    assert w.book.calls[-1] == ("ended", "n1", 0)


def test_book_moves_is_exactly_the_change_of_holder() -> None:
    pending = Task(J, 0)
    starting = replace(pending, state=TaskState.STARTING, node="n1", attempt=1)
    running = replace(starting, state=TaskState.RUNNING)
    assert list(book_moves({T: pending}, {T: starting})) == [(T, None, "n1")]
    assert list(book_moves({T: starting}, {T: running})) == []
    assert list(book_moves({T: running}, {T: replace(running, state=TaskState.LOST)})) == [(T, "n1", None)]
    assert list(book_moves({T: running}, {T: replace(running, state=TaskState.PENDING, node="")})) == [(T, "n1", None)]
    assert list(book_moves({T: None}, {T: pending})) == []


def test_launches_carry_the_class_and_welcomes_the_bin() -> None:
    w = _w()
    launch = Launch(T, 1, J, 0, spec(), node="n1")
    assert w.lotes.decorate(launch).lotes_class == 0  # type: ignore[attr-defined]
    welcome = w.lotes.decorate(Welcome("n1", 1.0, (), 5.0))
    target = welcome.bin_target  # type: ignore[attr-defined]
    assert isinstance(target, BinTarget) and target.config and target.classes == {T: 0}
    assert sum(target.counts.values()) >= 1


def test_a_failed_solve_falls_back_and_recounts_later() -> None:
    w = _w()
    w.lotes.adopt(Outcome(None, "scipy (HiGHS) is not installed"), "test", 0.0)
    assert w.lotes.status_view().fallback == "lotes falls back to anbf: scipy (HiGHS) is not installed"
    assert w.lotes.klass(Resources(1, 2**20)) is None
    assert w.lotes.decorate(Launch(T, 1, J, 0, spec(), node="n1")).lotes_class == -1  # type: ignore[attr-defined]


def test_request_window_slides_and_counts_distinct_requests() -> None:
    window = RequestWindow(size=3)
    small, big = Resources(1, 1), Resources(4, 4)
    window.add(small, tasks=2)
    window.add(big, tasks=2)
    assert len(window) == 3 and window.counts == {small: 1, big: 2}


def test_learned_classes_resolve_when_their_shares_drift() -> None:
    from tcluster.master.features.lotes_live import offline
    from tcluster.domain.model import JobSpec
    w = World()
    w.join("n1")
    w.join("n2")
    book = LotesBook()
    lotes = LotesLive(FakeMaster(w), book, k=2, drift_threshold=0.1)  # type: ignore[arg-type]
    small, big = JobSpec(("x",), Resources(1, 2**20), tasks=50), JobSpec(("x",), Resources(3, 2**30), tasks=50)
    lotes.submitted(small)
    lotes.submitted(big)
    inputs = lotes._current_inputs()
    assert lotes._due(inputs) == "no plan yet"
    outcome, classes = offline(inputs.nodes, inputs.kinds, None, "", lotes.window.requests(), 2, 0, None)
    assert len(classes) == 2 and outcome.plan is not None
    lotes.adopt(outcome, "no plan yet", 0.01)
    assert lotes._due(lotes._current_inputs()) is None            # shares as planned: 0.5 / 0.5
    lotes.submitted(replace(big, tasks=100))                       # now 50 small, 150 big
    why = lotes._due(lotes._current_inputs())
    assert why is not None and "drifted by 0.25" in why
    assert list(lotes.observed_shares()) == [0.25, 0.75]
