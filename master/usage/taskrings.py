"""Every task's usage history in shared arrays, one row per task slot.

A slot is taken when a task first reports and given back once its finished history is on
disk. Each tier (recent: one bucket per heartbeat; long: `long_step_s` buckets) is a ring
of bfloat16 rows per slot, plus one float32 accumulator row per slot for its open bucket:
the sums of the rate fields and the maxima of the level fields, and how many samples.

A drain's samples, from every heartbeat since the last one, go in with a fixed number of
array operations whatever their count. Usually each slot is in a drain once: its sample
continues the open bucket (merged into the accumulator) or closes it (the closed rows of
all slots written with one fancy-indexed assignment). When a slot comes several times the
samples are grouped by slot and runs in one bucket reduced with `reduceat` first. Rings
are bucket-major, so one bucket of many slots is contiguous; gaps (buckets nobody
reported) are cleared in one assignment too. Storage grows in blocks of slots (an eighth
of what exists, at least 16): growing never copies the rings nor leaves much unused."""

from __future__ import annotations

import math
import threading
from bisect import bisect_right
from typing import Sequence

import numpy as np

from tcluster.master.usage.clearbehind import ClearBehind
from tcluster.master.usage.ingest import group
from tcluster.master.usage.prefill import BlockPrefill
from tcluster.master.usage.tierarrays import TierArrays
from tcluster.master.usage.history import MEAN, NAN_BF16, TASK, HistoryConfig, Schema, read_tiers, to_bf16, from_bf16

MIN_BLOCK = 16
CLEAR_RUN = 256     # fresh slots cleared together (TaskRings._clear_fresh)


class TaskRings:
    def __init__(self, config: HistoryConfig, schema: Schema = TASK, prefill: bool = False) -> None:
        self.schema = schema
        (step, size), (long_step, long_size) = config.tiers()
        mean = np.array([agg == MEAN for agg in schema.aggs])
        width = len(schema.fields)
        self.tiers = [TierArrays(step, size, width, mean), TierArrays(long_step, long_size, width, mean)]
        self.starts: list[int] = []            # first slot of each block
        self.capacity = 0
        self.free: list[int] = []
        self.used = 0
        self.dirty = np.empty(0, dtype=bool)
        self.owners = np.empty(0, dtype=np.int64)   # bumped at each take: a view of a slot given back goes stale
        # Per block, per slot: its rings hold NaN rows or data, not unwritten memory. Never
        # replaced (a block's marks are written by ClearBehind's thread too), under _clearing.
        self.block_cleared: list[np.ndarray] = []
        self._clearing = threading.Lock()
        self._prefill = BlockPrefill() if prefill else None     # the next block, made off the loop
        self._behind = ClearBehind(self._clearing, self.block_cleared.__getitem__, self._clear_rows, CLEAR_RUN) \
            if prefill else None                                 # ... or, missed, cleared behind it

    @property
    def cleared(self) -> np.ndarray:
        """Every slot's mark, a copy (block_cleared holds them)."""
        with self._clearing:
            return np.concatenate(self.block_cleared) if self.block_cleared else np.empty(0, dtype=bool)

    # ---- slots ----

    def take(self) -> int:
        if not self.free:
            block = max(MIN_BLOCK, self.capacity // 8)
            made = self._prefill.take(block, len(self.tiers)) if self._prefill is not None else None
            self.starts.append(self.capacity)
            self.free = list(range(self.capacity + block - 1, self.capacity - 1, -1))
            self.capacity += block
            ready: list[np.ndarray | None] = list(made) if made is not None else [None] * len(self.tiers)
            for tier, rows in zip(self.tiers, ready):
                tier.grow(self.capacity, block, rows)
            self.dirty = np.concatenate([self.dirty, np.zeros(block, dtype=bool)])
            self.owners = np.concatenate([self.owners, np.zeros(block, dtype=np.int64)])
            self.block_cleared.append(np.full(block, made is not None))
            if made is None and self._behind is not None:
                self._behind.behind(len(self.starts) - 1)
            if self._prefill is not None:
                following = max(MIN_BLOCK, self.capacity // 8)
                self._prefill.prepare(following, [(t.size, following, t.width) for t in self.tiers])
        self.used += 1
        slot = self.free.pop()
        self.owners[slot] += 1
        block_number, row = self.locate(slot)
        if not self.block_cleared[block_number][row]:      # first taken: its rows may be unwritten memory
            self._clear_fresh(block_number, row)
        return slot

    def _clear_fresh(self, block_number: int, row: int) -> None:
        """NaN rows ("no sample") for slot `row` of the block and the fresh slots after it, up
        to CLEAR_RUN: in a bucket-major block they are one contiguous run per bucket, where one
        slot alone is a strided column (37 us a slot at 1,000 new tasks/s). A new block's
        slots are taken lowest first, so what is not cleared yet is the block's tail."""
        with self._clearing:
            marks = self.block_cleared[block_number]
            end = min(row + CLEAR_RUN, len(marks))
            if self._behind is not None:      # not into a run its thread is clearing now
                end = self._behind.free_end(block_number, row, end)
            taken = np.flatnonzero(marks[row:end])
            if len(taken):
                end = row + int(taken[0])
            self._clear_rows(block_number, row, end)
            marks[row:end] = True

    def _clear_rows(self, block_number: int, start: int, end: int) -> None:
        for tier in self.tiers:
            tier.blocks[block_number][:, start:end] = NAN_BF16

    def give_back(self, slot: int) -> None:
        block, row = self.locate(slot)
        for tier in self.tiers:
            tier.reset(slot, block, row)
        self.dirty[slot] = False
        self.free.append(slot)
        self.used -= 1

    def locate(self, slot: int) -> tuple[int, int]:
        block = bisect_right(self.starts, slot) - 1
        return block, slot - self.starts[block]

    def nbytes(self) -> int:
        per_slot = sum(t.acc.itemsize * t.width + 20 for t in self.tiers) + 1
        return sum(b.nbytes for t in self.tiers for b in t.blocks) + per_slot * self.capacity

    # ---- vectorised writes ----

    def _put(self, tier: TierArrays, slots: np.ndarray, buckets: np.ndarray, rows: np.ndarray) -> None:
        """Writes float32 rows at (slot, bucket)."""
        if len(slots):
            self._put_bits(tier, slots, buckets, to_bf16(rows))

    def _put_bits(self, tier: TierArrays, slots: np.ndarray, buckets: np.ndarray, bits: np.ndarray | int) -> None:
        pos = buckets % tier.size
        if len(self.starts) == 1:
            tier.blocks[0][pos, slots] = bits
            return
        which = np.searchsorted(self.starts, slots, side="right") - 1
        if (np.diff(which) < 0).any():
            order = np.argsort(which, kind="stable")
            which, slots, pos = which[order], slots[order], pos[order]
            bits = bits[order] if isinstance(bits, np.ndarray) else bits
        cuts = np.flatnonzero(np.diff(which)) + 1
        for lo, hi in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(slots)]]).tolist()):
            k = int(which[lo])
            tier.blocks[k][pos[lo:hi], slots[lo:hi] - self.starts[k]] = (
                bits[lo:hi] if isinstance(bits, np.ndarray) else bits)

    def _clear(self, tier: TierArrays, slots: np.ndarray, after: np.ndarray, before: np.ndarray) -> None:
        """Buckets between `after` and `before` that nobody reported (a node down, a
        restart) become gaps; past a ring's length, the whole ring."""
        lengths = np.minimum(before - after - 1, tier.size)
        total = int(lengths.sum())
        if total <= 0:
            return
        ends = np.cumsum(lengths)
        offsets = np.arange(total) - np.repeat(ends - lengths, lengths)
        buckets = np.repeat(before - lengths, lengths) + offsets
        self._put_bits(tier, np.repeat(slots, lengths), buckets, NAN_BF16)

    def add(self, slots: np.ndarray, times: np.ndarray, rows: np.ndarray, first: np.ndarray | None = None) -> None:
        """Samples in any order, several per slot allowed (each slot's in time order);
        `first`: they are grouped by slot already and these start a slot's group."""
        if not len(slots):
            return
        if first is None:
            order, first, _ = group(slots)
            if order is not None:
                slots, times, rows = slots[order], times[order], rows[order]
        once = bool(first.all())
        for tier in self.tiers:
            buckets = np.floor(times / tier.step).astype(np.int64)
            # A slot's first bucket: nothing before it is worth a flush (a new task's first
            # flush wrote its whole rings, 888 rows of NaN by default, 16 KB a task).
            fresh = first & (tier.last[slots] < 0)
            tier.flushed[slots[fresh]] = buckets[fresh]
            if once and not (buckets < tier.last[slots]).any():
                self._add_once(tier, slots, buckets, rows)
            else:
                self._add_tier(tier, slots, first, buckets, rows)
        self.dirty[slots] = True

    def _add_once(self, tier: TierArrays, slots: np.ndarray, buckets: np.ndarray, rows: np.ndarray) -> None:
        """The usual drain: each slot once, none late. A sample continues its slot's open
        bucket, or closes it and opens the next."""
        last, counts = tier.last[slots], tier.count[slots]
        cont = (buckets == last) & (counts > 0)
        if cont.all():
            s, acc = slots, tier.acc[slots]
            tier.acc[s] = np.where(tier.mean, acc + rows, np.maximum(acc, rows))
            tier.count[s] = counts + 1
            return
        if cont.any():
            s, acc = slots[cont], tier.acc[slots[cont]]
            tier.acc[s] = np.where(tier.mean, acc + rows[cont], np.maximum(acc, rows[cont]))
            tier.count[s] = counts[cont] + 1
            fresh = ~cont
            slots, buckets, rows, last, counts = slots[fresh], buckets[fresh], rows[fresh], last[fresh], counts[fresh]
        closing = counts > 0
        s = slots if closing.all() else slots[closing]
        self._put(tier, s, tier.last[s], tier.rows_of(tier.count[s], tier.acc[s]))
        gap = (buckets - last > 1) & (last >= 0)
        if gap.any():
            self._clear(tier, slots[gap], last[gap], buckets[gap])
        tier.last[slots], tier.acc[slots], tier.count[slots] = buckets, rows, 1

    def _add_tier(self, tier: TierArrays, slots: np.ndarray, first: np.ndarray, buckets: np.ndarray,
                  rows: np.ndarray) -> None:
        """The general case: several samples of a slot, late ones (slots grouped, each's in
        arrival order)."""
        runs = self._runs(tier, slots, first, buckets, rows)
        if runs is None:
            return
        r_slots, r_buckets, r_first, agg, counts = runs
        # A slot's first run either continues its open bucket or closes it.
        open_slots = r_slots[r_first]
        has_open = tier.count[open_slots] > 0
        cont = np.zeros(len(r_slots), dtype=bool)
        cont[r_first] = has_open & (r_buckets[r_first] == tier.last[open_slots])
        if cont.any():
            s = r_slots[cont]
            agg[cont] = np.where(tier.mean, agg[cont] + tier.acc[s], np.maximum(agg[cont], tier.acc[s]))
            counts[cont] += tier.count[s]
        closing = open_slots[has_open & ~cont[r_first]]
        self._put(tier, closing, tier.last[closing], tier.rows_of(tier.count[closing], tier.acc[closing]))
        # The last run of each slot stays open; the others are closed buckets.
        r_last = np.empty(len(r_slots), dtype=bool)
        r_last[-1] = True
        np.not_equal(r_slots[1:], r_slots[:-1], out=r_last[:-1])
        self._gaps(tier, r_slots, r_buckets, r_first)
        done = ~r_last
        if done.any():
            newest = np.repeat(r_buckets[r_last], np.diff(np.append(np.flatnonzero(r_first), len(r_slots))))
            done &= r_buckets > newest - tier.size    # older than the ring: would land on newer rows
            self._put(tier, r_slots[done], r_buckets[done], tier.rows_of(counts[done], agg[done]))
        s = r_slots[r_last]
        tier.last[s], tier.acc[s], tier.count[s] = r_buckets[r_last], agg[r_last], counts[r_last]

    @staticmethod
    def _runs(tier: TierArrays, slots: np.ndarray, first: np.ndarray, buckets: np.ndarray,
              rows: np.ndarray) -> tuple[np.ndarray, ...] | None:
        """Samples of one slot in one bucket, reduced: (slots, buckets, first of its slot,
        sums/maxima, counts) per run; None if every sample was late."""
        prev = np.empty_like(buckets)
        prev[1:] = buckets[:-1]
        prev[first] = tier.last[slots[first]]
        while (buckets < prev).any():                 # late: its bucket is closed already
            keep = buckets >= prev                    # (again: one after a late one may be late too)
            slots, buckets, rows = slots[keep], buckets[keep], rows[keep]
            if not len(slots):
                return None
            first = np.empty(len(slots), dtype=bool)
            first[0] = True
            np.not_equal(slots[1:], slots[:-1], out=first[1:])
            prev = np.empty_like(buckets)
            prev[1:] = buckets[:-1]
            prev[first] = tier.last[slots[first]]
        starts = np.flatnonzero(first | (buckets != prev))
        if len(starts) == len(slots):                 # one sample per bucket: nothing to reduce
            agg, counts = rows.copy(), np.ones(len(slots), dtype=np.int32)
        else:
            agg = np.where(tier.mean, np.add.reduceat(rows, starts), np.maximum.reduceat(rows, starts))
            counts = np.diff(np.append(starts, len(slots))).astype(np.int32)
        return slots[starts], buckets[starts], first[starts], agg, counts

    def _gaps(self, tier: TierArrays, r_slots: np.ndarray, r_buckets: np.ndarray, r_first: np.ndarray) -> None:
        before = np.empty_like(r_buckets)
        before[1:] = r_buckets[:-1]
        before[r_first] = tier.last[r_slots[r_first]]
        gap = (r_buckets - before > 1) & (before >= 0)
        if gap.any():
            self._clear(tier, r_slots[gap], before[gap], r_buckets[gap])

    def settle(self, slots: Sequence[int] | np.ndarray) -> None:
        """Writes the open buckets of `slots` into their rings (they may still grow)."""
        slots = np.unique(np.asarray(slots, dtype=np.int64))
        for tier in self.tiers:
            s = slots[tier.count[slots] > 0]
            self._put(tier, s, tier.last[s], tier.rows_of(tier.count[s], tier.acc[s]))

    # ---- one slot ----

    def ring(self, tier: int, slot: int) -> np.ndarray:
        block, row = self.locate(slot)
        return self.tiers[tier].blocks[block][:, row]

    def series(self, slot: int) -> SlotSeries:
        return SlotSeries(self, slot)


class SlotTier:
    """A Tier's reading and persistence interface over one slot of a TierArrays."""

    def __init__(self, rings: TaskRings, number: int, slot: int) -> None:
        self.rings, self.number, self.slot = rings, number, slot
        self.arrays = rings.tiers[number]
        self.step, self.size = self.arrays.step, self.arrays.size
        self._ring: np.ndarray | None = None
        self.owner = int(rings.owners[slot])

    @property
    def current(self) -> bool:
        """Still the slot of the task it was made for (a flush that finishes after the slot
        went to another task must not mark that task's buckets as written)."""
        return int(self.rings.owners[self.slot]) == self.owner

    @property
    def last(self) -> int:
        return int(self.arrays.last[self.slot])

    @property
    def flushed(self) -> int:
        return int(self.arrays.flushed[self.slot])

    @flushed.setter
    def flushed(self, value: int) -> None:
        if self.current:
            self.arrays.flushed[self.slot] = value

    @property
    def data(self) -> np.ndarray:
        if self._ring is None:       # a view: blocks never move, so it stays valid
            self._ring = self.rings.ring(self.number, self.slot)
        return self._ring

    def stage_open(self) -> None:
        """This tier's open bucket into the ring (it may still grow)."""
        arrays, slot = self.arrays, self.slot
        count = int(arrays.count[slot])
        if count:
            row = arrays.rows_of(arrays.count[slot:slot + 1], arrays.acc[slot:slot + 1])
            self.data[int(arrays.last[slot]) % self.size] = to_bf16(row)[0]

    def unflushed(self, settled: bool = False) -> tuple[int, np.ndarray] | None:
        last, flushed = self.last, self.flushed
        if last < 0 or last < flushed:
            return None
        if not settled:
            self.stage_open()
        first = max(flushed, last - self.size + 1, 0)
        return first, self.data[np.arange(first, last + 1) % self.size].copy()

    def put_rows(self, first: int, rows: np.ndarray) -> None:
        """Restores buckets first.. from disk: they become closed buckets."""
        self.stage_open()
        arrays, slot, end = self.arrays, self.slot, first + len(rows) - 1
        if end > self.last:
            if self.last >= 0:
                self.rings._clear(arrays, np.array([slot]), np.array([self.last]), np.array([first]))
            arrays.last[slot], arrays.count[slot] = end, 0
        ring, last = self.data, self.last
        for i in range(len(rows)):
            if first + i > last - self.size:
                ring[(first + i) % self.size] = rows[i]
        arrays.flushed[slot] = max(self.flushed, end)

    def read(self, since: float, until: float) -> tuple[np.ndarray, np.ndarray]:
        self.stage_open()
        last, width = self.last, self.arrays.width
        if last < 0:
            return np.empty(0), np.empty((0, width), dtype=np.float32)
        lo = max(last - self.size + 1, math.floor(since / self.step), 0)
        hi = min(last, math.floor(until / self.step))
        if hi < lo:
            return np.empty(0), np.empty((0, width), dtype=np.float32)
        index = np.arange(lo, hi + 1)
        rows = from_bf16(self.data[index % self.size])
        present = ~np.isnan(rows).all(axis=1)
        return index[present] * self.step, rows[present]

    def nbytes(self) -> int:
        return self.data.nbytes


class SlotSeries:
    """The Series interface (read, tiers, dirty) over one slot of TaskRings."""

    def __init__(self, rings: TaskRings, slot: int) -> None:
        self.rings, self.slot, self.schema = rings, slot, rings.schema
        self.tiers = [SlotTier(rings, n, slot) for n in range(len(rings.tiers))]

    @property
    def dirty(self) -> bool:
        return self.tiers[0].current and bool(self.rings.dirty[self.slot])

    @dirty.setter
    def dirty(self, value: bool) -> None:
        if self.tiers[0].current:
            self.rings.dirty[self.slot] = value

    def read(self, since: float, until: float, fields: Sequence[str] | None = None) -> dict[str, object]:
        return read_tiers(self.schema, self.tiers, since, until, fields)
