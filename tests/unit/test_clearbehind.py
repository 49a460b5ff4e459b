"""ClearBehind (master/usage/clearbehind.py): a block the prefill missed is cleared by a
thread behind the loop, never over a slot the loop has taken and written."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tcluster.master.usage import taskrings
from tcluster.master.usage.clearbehind import ClearBehind, uncleared_runs
from tcluster.master.usage.history import MAX, MEAN, NAN_BF16, HistoryConfig, Schema
from tcluster.master.usage.prefill import BlockPrefill
from tcluster.master.usage.taskrings import MIN_BLOCK, TaskRings
from tcluster.master.usage.tierarrays import TierArrays

RATE_LEVEL = Schema(("rate", "level"), (MEAN, MAX))
CONFIG = HistoryConfig(step_s=1.0, recent_s=5.0, long_step_s=10.0, long_s=60.0)


@pytest.mark.parametrize("marks, runs", [
    ([], []), ([True, True], []), ([False] * 3, [(0, 3)]),
    ([True, False, False, True, False], [(1, 3), (4, 5)]), ([False, True], [(0, 1)]),
])
def test_uncleared_runs(marks: list[bool], runs: list[tuple[int, int]]) -> None:
    assert uncleared_runs(np.array(marks, dtype=bool)) == runs


@pytest.fixture
def missed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every prefill misses, and a new block holds garbage (what np.empty may give); returns
    the blocks handed to ClearBehind, which the test clears itself."""
    grow = TierArrays.grow

    def grow_with_garbage(self: TierArrays, capacity: int, block: int, made: np.ndarray | None = None) -> None:
        grow(self, capacity, block, made)
        self.blocks[-1][:] = 0
    monkeypatch.setattr(TierArrays, "grow", grow_with_garbage)
    monkeypatch.setattr(BlockPrefill, "take", lambda self, slots, tiers: None)
    handed: list[int] = []
    monkeypatch.setattr(ClearBehind, "behind", lambda self, block: handed.append(block))
    monkeypatch.setattr(taskrings, "CLEAR_RUN", 2)       # the loop clears two slots at each first take
    return handed


def _write(rings: TaskRings, slots: list[int], value: float) -> None:
    """Samples at 1 s and 2 s: the first bucket closes into the block's rows."""
    rows = np.array([[value, value]] * len(slots), dtype=np.float32)
    for t in (1.0, 2.0):
        rings.add(np.array(slots), np.full(len(slots), t), rows)


def test_the_thread_clears_only_the_slots_the_loop_has_not_taken(missed: list[int]) -> None:
    rings = TaskRings(CONFIG, RATE_LEVEL, prefill=True)
    first = [rings.take() for _ in range(MIN_BLOCK)]
    taken = [rings.take() for _ in range(3)]              # the second block: rows 0-3 cleared by the loop
    assert missed == [0, 1] and [rings.locate(s) for s in taken] == [(1, 0), (1, 1), (1, 2)]
    _write(rings, taken, 5.0)
    assert rings._behind is not None
    rings._behind.clear_block(1)                          # what its thread does
    assert rings.cleared.all()
    assert [rings.series(s).read(0, 100)["rate"] for s in taken] == [[5.0, 5.0]] * 3
    untouched = rings.tiers[0].blocks[1][:, 4:]
    assert (untouched == NAN_BF16).all() and (rings.tiers[1].blocks[1][:, 4:] == NAN_BF16).all()
    assert rings.take() not in first + taken              # the next slot needs no clear on the loop
    assert rings.series(rings.take()).read(0, 100)["rate"] == []


def test_a_slot_the_thread_cleared_is_not_cleared_again_when_taken(missed: list[int]) -> None:
    rings = TaskRings(CONFIG, RATE_LEVEL, prefill=True)
    assert rings._behind is not None
    [rings.take() for _ in range(MIN_BLOCK)]
    slot = rings.take()
    rings._behind.clear_block(1)
    later = rings.take()
    _write(rings, [slot, later], 7.0)
    cleared: list[tuple[int, int]] = []
    rings._clear_rows = lambda block, start, end: cleared.append((start, end))   # type: ignore[method-assign]
    rings.take()
    assert cleared == [] and [rings.series(s).read(0, 100)["rate"] for s in (slot, later)] == [[7.0, 7.0]] * 2


def test_the_thread_and_the_loop_together_lose_no_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real thread, racing a loop that takes slots of missed blocks and writes them at
    once: each slot's first bucket closes into its block's rows while the thread clears."""
    monkeypatch.setattr(BlockPrefill, "take", lambda self, slots, tiers: None)
    rings = TaskRings(CONFIG, RATE_LEVEL, prefill=True)
    assert rings._behind is not None
    slots: list[int] = []
    for _ in range(500):
        batch = [rings.take() for _ in range(7)]
        rows = np.array([[1.0, 1.0]] * len(batch), dtype=np.float32)
        for t in (1.0, 2.0):               # bucket 1 is written into the block when bucket 2 opens
            rings.add(np.array(batch), np.full(len(batch), t), rows * t)
        slots += batch
    assert rings._behind.idle.wait(30)
    assert rings.cleared.all() and len(rings.tiers[0].blocks) > 10
    reads = [rings.series(s).read(0, 100)["rate"] for s in slots]
    assert all(r == [1.0, 2.0] for r in reads), [(s, r) for s, r in zip(slots, reads) if r != [1.0, 2.0]][:5]


def _held_behind(size: int, run: int) -> tuple[ClearBehind, np.ndarray, threading.Lock, threading.Event, list]:
    """A ClearBehind over one block of `size` slots whose clear of each run waits for `go`."""
    lock, marks, go, cleared = threading.Lock(), np.zeros(size, dtype=bool), threading.Event(), []

    def clear(block: int, start: int, end: int) -> None:
        cleared.append((start, end))
        assert go.wait(30)
    return ClearBehind(lock, lambda block: marks, clear, run), marks, lock, go, cleared


def test_the_thread_clears_from_the_tail_and_the_loop_never_waits_for_a_run_it_does_not_need() -> None:
    """The loop's first takes are the block's head; the thread clears the tail first, a run
    claimed under the lock but cleared without it (a run held 25-90 ms under the lock kept
    the loop's take waiting, issue 38)."""
    behind, marks, lock, go, cleared = _held_behind(10, 4)
    behind.behind(0)
    for _ in range(3000):                      # the thread claims its first run, then waits in clear
        if cleared:
            break
        threading.Event().wait(0.01)
    assert cleared == [(6, 10)]
    assert lock.acquire(timeout=30)            # the loop, at the head: not blocked, and not into 6-10
    try:
        assert behind.free_end(0, 0, 8) == 6
        assert behind.free_end(0, 2, 4) == 4
    finally:
        lock.release()
    go.set()
    assert behind.idle.wait(30)
    assert cleared == [(6, 10), (2, 6), (0, 2)] and marks.all()


def test_the_loop_waits_for_a_slot_inside_the_run_being_cleared_until_it_is_marked() -> None:
    behind, marks, lock, go, cleared = _held_behind(8, 4)
    marks[:4] = True                            # the loop's own first run
    behind.behind(0)
    for _ in range(3000):
        if cleared:
            break
        threading.Event().wait(0.01)
    assert cleared == [(4, 8)]
    seen: list[bool] = []

    def loop_takes_slot_5() -> None:
        with lock:
            behind.free_end(0, 5, 8)
            seen.append(bool(marks[5]))         # cleared and marked by the thread: nothing to clear
    taker = threading.Thread(target=loop_takes_slot_5)
    taker.start()
    for _ in range(3000):                      # until it waits on the thread's run
        if behind._cleared._waiters:           # type: ignore[attr-defined]
            break
        threading.Event().wait(0.01)
    assert taker.is_alive() and seen == []
    assert lock.acquire(timeout=30)            # it waits with the lock released
    lock.release()
    go.set()
    taker.join(30)
    assert seen == [True] and behind.idle.wait(30) and marks.all()


def test_a_run_whose_clear_failed_stays_unmarked_and_the_thread_goes_on() -> None:
    """Marked but not cleared, its slots would read unwritten memory as samples: they stay
    for the loop to clear when it takes them (the thread gives the rest of that block up: its
    tail run failed first), and the next block is still cleared."""
    lock, marks = threading.Lock(), {0: np.zeros(6, dtype=bool), 1: np.zeros(6, dtype=bool)}

    def clear(block: int, start: int, end: int) -> None:
        if block == 0 and start >= 3:
            raise MemoryError("no pages")
    behind = ClearBehind(lock, marks.__getitem__, clear, 3)
    behind.behind(0)
    behind.behind(1)
    assert behind.idle.wait(30)
    assert not marks[0].any() and marks[1].all()
