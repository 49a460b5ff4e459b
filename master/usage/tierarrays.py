"""One tier of TaskRings (master/usage/taskrings.py) over every task slot: the rings in
blocks of slots (bucket-major), and each slot's open bucket, newest bucket and flush mark
in flat arrays."""

from __future__ import annotations

import numpy as np

from tcluster.master.usage.history import NAN_BF16


class TierArrays:
    """One tier over every slot: the rings in blocks, the open buckets in flat arrays."""

    def __init__(self, step: float, size: int, width: int, mean: np.ndarray) -> None:
        self.step, self.size, self.width, self.mean = step, size, width, mean
        self.blocks: list[np.ndarray] = []
        self.last = np.empty(0, dtype=np.int64)          # newest bucket per slot; -1: none
        self.acc = np.empty((0, width), dtype=np.float32)  # open bucket: sums (MEAN) / maxima (MAX)
        self.count = np.empty(0, dtype=np.int32)          # samples in the open bucket
        self.flushed = np.empty(0, dtype=np.int64)        # buckets up to this one are on disk

    def grow(self, capacity: int, block: int, made: np.ndarray | None = None) -> None:
        """`made`: the block's rows, NaN already (master/usage/prefill.py)."""
        # Bucket-major: a drain writes one bucket of many slots, next to each other in memory
        # (slot-major, every row written would be on a page of its own). Unless the prefill
        # made it, left unwritten here: TaskRings.take clears a slot's rows when it is first
        # taken. Filling a block of an eighth of the slots at once on the loop (70 MB at
        # 32,000 slots) held it for 100-350 ms at 1,000 new tasks/s (issue 38); untouched
        # pages cost nothing until then.
        self.blocks.append(np.empty((self.size, block, self.width), dtype=np.uint16) if made is None else made)
        extra = capacity - len(self.last)
        self.last = np.concatenate([self.last, np.full(extra, -1, dtype=np.int64)])
        self.acc = np.concatenate([self.acc, np.zeros((extra, self.width), dtype=np.float32)])
        self.count = np.concatenate([self.count, np.zeros(extra, dtype=np.int32)])
        self.flushed = np.concatenate([self.flushed, np.full(extra, -1, dtype=np.int64)])

    def reset(self, slot: int, block: int, row: int) -> None:
        self.blocks[block][:, row] = NAN_BF16
        self.last[slot], self.count[slot], self.flushed[slot] = -1, 0, -1
        self.acc[slot] = 0.0

    def rows_of(self, counts: np.ndarray, acc: np.ndarray) -> np.ndarray:
        """Bucket rows (float32) from accumulators: sums become means."""
        if (counts == 1).all():
            return acc
        return np.where(self.mean, acc / np.maximum(counts, 1)[:, None], acc)
