"""The next block of usage rings, filled with "no sample" off the event loop (issue 38).

A new block of TaskRings is an eighth of every slot there is: at 32,000 slots, 70 MB of
rows per tier that must read as NaN before a slot is used. Written on the loop, the first
touch of those pages held the master's loop for 100-500 ms during a drain at 1,000 new
tasks/s. numpy releases the GIL while it fills an array, so a thread prepares the block
the rings will ask for next (its size is known: an eighth of the capacity after the last
growth), and the drain only takes it. When the rings grow before it is ready, or by
another size, they fall back to clearing slots as they are taken (TaskRings._clear_fresh).
The spare costs memory once: one block, held until the next growth."""

from __future__ import annotations

import threading

import numpy as np

from tcluster.master.usage.history import NAN_BF16

Shape = tuple[int, int, int]


class BlockPrefill:
    def __init__(self) -> None:
        self._slots = 0
        self._blocks: list[np.ndarray] = []
        self._done = threading.Event()

    def prepare(self, slots: int, shapes: list[Shape]) -> None:
        """Fills arrays of `shapes` (one per tier) in a thread of its own, for a block of
        `slots`; what was prepared before and not taken is dropped."""
        done, blocks = threading.Event(), list[np.ndarray]()
        self._slots, self._blocks, self._done = slots, blocks, done

        def fill() -> None:
            try:
                blocks.extend(np.full(shape, NAN_BF16, dtype=np.uint16) for shape in shapes)
            finally:
                done.set()
        threading.Thread(target=fill, name="tcl-rings-prefill", daemon=True).start()

    def take(self, slots: int, tiers: int) -> list[np.ndarray] | None:
        """The prepared block if it is ready and of `slots`, else None; either way the next
        growth needs a new one."""
        ready = self._done.is_set() and self._slots == slots and len(self._blocks) == tiers
        blocks = self._blocks if ready else None
        self._slots, self._blocks = 0, []
        return blocks
