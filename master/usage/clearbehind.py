"""The fresh slots of a block the prefill missed, cleared off the loop (issue 38).

In a burst the rings grow faster than BlockPrefill fills the next block in its thread, so
such a block comes unwritten and TaskRings.take cleared its slots on the loop, CLEAR_RUN at
a time, as they were first taken (py-spy of the master in bench/cluster_scale.py --profile:
TaskRings._clear_fresh under the dashboard's drain). Here one worker thread clears every
such block behind the loop, a run of slots at a time, under the lock the loop's own clear
takes, and only slots not marked cleared yet: a slot the loop took was cleared and marked
first, and only then written, so it is never cleared again. numpy releases the GIL while
it fills a slice, so the loop runs meanwhile."""

from __future__ import annotations

import queue
import threading
from typing import Callable

import numpy as np

Clear = Callable[[int, int, int], None]     # (block, first slot, end): rows of those slots to NaN


def uncleared_runs(marks: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of False in `marks`."""
    edges = np.flatnonzero(np.diff(np.concatenate([[True], marks, [True]]).astype(np.int8)))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


class ClearBehind:
    def __init__(self, lock: threading.Lock, marks: Callable[[int], np.ndarray], clear: Clear, run: int) -> None:
        self._lock, self._marks, self._clear, self._run = lock, marks, clear, run
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
            finally:
                if self._blocks.empty():
                    self.idle.set()

    def clear_block(self, block: int) -> None:
        size = len(self._marks(block))
        for start in range(0, size, self._run):
            with self._lock:           # the loop's take() clears under it too
                marks = self._marks(block)
                for a, b in uncleared_runs(marks[start:start + self._run]):
                    self._clear(block, start + a, start + b)
                    marks[start + a:start + b] = True
