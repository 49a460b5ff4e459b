"""What a history flush writes of many task slots at once (issue 38).

A flush writes each changed task's buckets since its last flush. Asking each slot's
`SlotTier.unflushed` (a few small numpy calls, per tier, per task) held the master's loop
~50 ms a second with 20,000 running tasks (the profile's `dash.collect`). Here the rows
of every chosen slot of one tier are gathered with one fancy index per block of slots,
and cut into each slot's bytes in Python (a slice and `tobytes` each): the chunks are
the ones `SlotTier.unflushed` gives, byte for byte (tests/unit/test_ringflush.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tcluster.master.usage.taskrings import TaskRings


@dataclass(frozen=True)
class RingChunks:
    """One tier's unflushed buckets of `slots[i]` (the `index[i]`-th slot asked for):
    `first[i]..last[i]`, as `rows[i]` (bfloat16 bits, row-major); slots with nothing to
    write are left out. `owners` is each slot's owner count at the collect: a mark for a
    slot given back since is dropped."""
    tier: int
    index: np.ndarray
    slots: np.ndarray
    owners: np.ndarray
    first: np.ndarray
    last: np.ndarray
    rows: list[bytes]


def unflushed_chunks(rings: TaskRings, slots: np.ndarray) -> list[RingChunks]:
    """Per tier, the buckets of `slots` (settled first: their open buckets written) that are
    not on disk yet, as SlotTier.unflushed(settled=True) gives them one slot at a time;
    in the order of the slots' blocks."""
    blocks = np.searchsorted(rings.starts, slots, side="right") - 1
    order = np.argsort(blocks, kind="stable")
    out = []
    for number, tier in enumerate(rings.tiers):
        last, flushed = tier.last[slots[order]], tier.flushed[slots[order]]
        keep = np.flatnonzero((last >= 0) & (last >= flushed))
        index = order[keep]
        s, last, flushed = slots[index], last[keep], flushed[keep]
        first = np.maximum(np.maximum(flushed, last - tier.size + 1), 0)
        counts = last - first + 1
        data = _gather(rings, number, s, blocks[index], first, counts)
        ends = np.cumsum(counts).tolist()
        rows = [data[a:b].tobytes() for a, b in zip([0, *ends[:-1]], ends)]
        out.append(RingChunks(number, index, s, rings.owners[s].copy(), first, last, rows))
    return out


def _gather(rings: TaskRings, number: int, slots: np.ndarray, blocks: np.ndarray, first: np.ndarray,
            counts: np.ndarray) -> np.ndarray:
    """The rows first..first+count-1 of each slot, one slot after another: (sum(counts),
    width). The slots come grouped by block, so each block's rows are one run of the output."""
    tier = rings.tiers[number]
    total = int(counts.sum())
    out = np.empty((total, tier.width), dtype=np.uint16)
    if not total:
        return out
    ends = np.cumsum(counts)
    offsets = np.arange(total) - np.repeat(ends - counts, counts)
    positions = (np.repeat(first, counts) + offsets) % tier.size
    columns = np.repeat(slots, counts)
    per_block = np.repeat(blocks, counts)
    cuts = np.flatnonzero(np.diff(per_block)) + 1
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), total]):
        block = int(per_block[lo])
        out[lo:hi] = tier.blocks[block][positions[lo:hi], columns[lo:hi] - rings.starts[block]]
    return out


def mark_flushed(rings: TaskRings, chunks: list[RingChunks]) -> None:
    """The written buckets are on disk, for the slots still held by the task they were read for."""
    for chunk in chunks:
        tier = rings.tiers[chunk.tier]
        same = rings.owners[chunk.slots] == chunk.owners
        s = chunk.slots[same]
        tier.flushed[s] = np.maximum(tier.flushed[s], chunk.last[same])


def mark_dirty(rings: TaskRings, slots: np.ndarray, owners: np.ndarray) -> None:
    """A failed write: the slots (still held by the same tasks) are written at the next flush."""
    rings.dirty[slots[rings.owners[slots] == owners]] = True
