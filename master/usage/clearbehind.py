"""The fresh slots of a block the prefill missed, cleared off the loop (issue 38).

In a burst the rings grow faster than BlockPrefill fills the next block in its thread, so
such a block comes unwritten and TaskRings.take cleared its slots on the loop, CLEAR_RUN at
a time, as they were first taken (py-spy of the master in bench/cluster_scale.py --profile:
TaskRings._clear_fresh under the dashboard's drain). Here one worker thread clears every
such block behind the loop, a run of slots at a time, and only slots not marked cleared
yet: a slot the loop took was cleared and marked first, and only then written, so it is
never cleared again. numpy releases the GIL while it fills a slice, so the loop runs
meanwhile.

The loop must not wait for the worker either. Holding the lock while it cleared a run (the
first touch of that run's pages), the worker kept the loop's first take of a new block
waiting 25-90 ms at 2,000 agents (a burst's slots). So the worker claims a run under the
lock, clears it without, and marks it under the lock; it starts at the block's tail, the
loop's takes at its head (lowest slot first). The loop waits only for a slot inside the
run being cleared, and clears its own run no further than that run's start."""

from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

import numpy as np

log = logging.getLogger(__name__)
Clear = Callable[[int, int, int], None]     # (block, first slot, end): rows of those slots to NaN


def uncleared_runs(marks: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of False in `marks`."""
    edges = np.flatnonzero(np.diff(np.concatenate([[True], marks, [True]]).astype(np.int8)))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


class ClearBehind:
    def __init__(self, lock: threading.Lock, marks: Callable[[int], np.ndarray], clear: Clear, run: int) -> None:
        self._lock, self._marks, self._clear, self._run = lock, marks, clear, run
        self._cleared = threading.Condition(lock)   # the loop waits on it for a slot being cleared
        self._claimed: tuple[int, int, int] | None = None   # (block, start, end) being cleared, unlocked
        self._blocks: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self.idle = threading.Event()      # nothing queued or being cleared (tests wait on it)
        self.idle.set()

    def behind(self, block: int) -> None:
        """Clears `block`'s slots that the loop has not taken yet, in the worker thread."""
        self.idle.clear()
        self._blocks.put(block)
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="tcl-rings-clear", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        while True:
            block = self._blocks.get()
            try:
                self.clear_block(block)
            except Exception:   # the thread goes on with the next block; the loop clears the rest
                log.exception("clearing ring block %d behind the loop failed", block)
            finally:
                if self._blocks.empty():
                    self.idle.set()

    def clear_block(self, block: int) -> None:
        """From the tail: the loop takes a new block's slots lowest first."""
        for end in range(len(self._marks(block)), 0, -self._run):
            start = max(0, end - self._run)
            with self._lock:
                runs = uncleared_runs(self._marks(block)[start:end])
                if not runs:
                    continue
                self._claimed = (block, start, end)
            cleared = False
            try:
                for a, b in runs:
                    self._clear(block, start + a, start + b)
                cleared = True
            finally:   # marked only if cleared: else the loop clears them when it takes them
                with self._cleared:
                    marks = self._marks(block)
                    for a, b in runs if cleared else ():
                        marks[start + a:start + b] = True
                    self._claimed = None
                    self._cleared.notify_all()

    def free_end(self, block: int, row: int, end: int) -> int:
        """How far from `row` the loop may clear `block` itself (at most to `end`), once no
        run being cleared holds `row`: it waits for such a run. Called under the lock."""
        while self._claimed is not None and self._claimed[0] == block and self._claimed[1] <= row < self._claimed[2]:
            self._cleared.wait()
        claimed = self._claimed
        if claimed is not None and claimed[0] == block and row < claimed[1]:
            end = min(end, claimed[1])
        return end
