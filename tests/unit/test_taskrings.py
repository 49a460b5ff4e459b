"""TaskRings: every task's rings in shared arrays, fed a whole drain at once."""

from __future__ import annotations

import numpy as np
import pytest

from tcluster.master.usage.history import MAX, MEAN, NAN_BF16, HistoryConfig, Schema, Series
from tcluster.master.usage.prefill import BlockPrefill
from tcluster.master.usage.taskrings import MIN_BLOCK, TaskRings
from tcluster.master.usage.tierarrays import TierArrays

RATE_LEVEL = Schema(("rate", "level"), (MEAN, MAX))


def _rings(step: float = 1.0, recent: float = 5.0, long_step: float = 10.0, long: float = 60.0) -> TaskRings:
    return TaskRings(HistoryConfig(step_s=step, recent_s=recent, long_step_s=long_step, long_s=long), RATE_LEVEL)


def _add(rings: TaskRings, samples: list[tuple[int, float, float, float]]) -> None:
    """(slot, t, rate, level) samples, in arrival order; sorted by slot as the recorder does."""
    order = sorted(range(len(samples)), key=lambda i: samples[i][0])
    rows = np.array([[samples[i][2], samples[i][3]] for i in order], dtype=np.float32)
    rings.add(np.array([samples[i][0] for i in order]), np.array([samples[i][1] for i in order]), rows)


def test_a_ring_wraps_forgets_its_oldest_buckets_and_clears_gaps() -> None:
    rings = _rings()
    slot = rings.take()
    _add(rings, [(slot, float(t), 1.0, float(t)) for t in range(10)])
    times, rows = rings.series(slot).tiers[0].read(0, 100)
    assert times.tolist() == [5.0, 6.0, 7.0, 8.0, 9.0] and rows[:, 1].tolist() == [5.0, 6.0, 7.0, 8.0, 9.0]
    _add(rings, [(slot, 12.0, 1.0, 12.0)])         # nothing at 10 and 11: a gap, not what the ring held
    times, _ = rings.series(slot).tiers[0].read(0, 100)
    assert times.tolist() == [8.0, 9.0, 12.0]


def test_downsampling_keeps_means_of_rates_and_maxima_of_levels_whatever_the_batching() -> None:
    samples = [(0, 100.0, 1.0, 5.0), (0, 103.0, 3.0, 9.0), (0, 109.9, 2.0, 7.0), (0, 111.0, 8.0, 1.0)]
    for batches in ([samples], [[s] for s in samples], [samples[:2], samples[2:]]):
        rings = _rings()
        rings.take()
        for batch in batches:
            _add(rings, batch)
        times, rows = rings.series(0).tiers[1].read(0, 1e9)
        assert times.tolist() == [100.0, 110.0]
        assert rows.tolist() == [[2.0, 9.0], [8.0, 1.0]]


def test_one_drain_of_many_slots_and_beats_matches_a_series_fed_one_sample_at_a_time() -> None:
    config = HistoryConfig(step_s=1.0, recent_s=30, long_step_s=10, long_s=120)
    rings, reference = TaskRings(config, RATE_LEVEL), {}
    rng = np.random.default_rng(7)
    samples = []
    for slot in range(3):
        rings.take()
        reference[slot] = Series(RATE_LEVEL, config)
    for beat in range(50):                       # beats of three tasks, one skipping some
        for slot in range(3):
            if slot == 2 and beat % 7 == 3:
                continue
            t = 1000.0 + beat + 0.1 * slot
            samples.append((slot, t, float(rng.integers(0, 8)), float(rng.integers(0, 100))))
    for chunk in (samples[:40], samples[40:41], samples[41:]):
        _add(rings, chunk)
    for slot, t, rate, level in samples:
        reference[slot].add(t, [rate, level])
    for slot in range(3):
        assert rings.series(slot).read(0, 1e9) == reference[slot].read(0, 1e9)


def test_a_late_sample_is_dropped_and_a_given_back_slot_comes_back_empty() -> None:
    rings = _rings()
    a, b = rings.take(), rings.take()
    _add(rings, [(a, 20.0, 1.0, 1.0), (b, 20.0, 2.0, 2.0)])
    _add(rings, [(a, 5.0, 9.0, 9.0)])              # its buckets closed long ago
    _add(rings, [(a, 5.0, 9.0, 9.0), (a, 8.0, 9.0, 9.0), (b, 6.0, 9.0, 9.0)])
    assert rings.series(a).read(0, 100)["level"] == [1.0]
    assert rings.series(a).tiers[0].last == 20
    rings.give_back(a)
    assert rings.take() == a and rings.series(a).read(0, 100)["t"] == []
    assert rings.series(b).read(0, 100)["rate"] == [2.0]


def test_storage_grows_in_blocks_without_moving_what_is_there() -> None:
    rings = _rings()
    slots = [rings.take() for _ in range(MIN_BLOCK + 1)]
    assert len(rings.tiers[0].blocks) == 2 and rings.capacity == 2 * MIN_BLOCK
    _add(rings, [(s, 50.0, float(s), float(s)) for s in slots])
    assert [rings.series(s).read(0, 100)["rate"] for s in (0, MIN_BLOCK)] == [[0.0], [float(MIN_BLOCK)]]
    with pytest.raises(IndexError):
        rings.ring(0, rings.capacity)


def test_a_new_block_is_cleared_a_run_of_slots_at_a_time_as_they_are_first_taken(
        monkeypatch: pytest.MonkeyPatch) -> None:
    grow = TierArrays.grow

    def grow_with_garbage(self: TierArrays, capacity: int, block: int, made: np.ndarray | None = None) -> None:
        grow(self, capacity, block, made)
        self.blocks[-1][:] = 0        # what np.empty may hand back: bfloat16 0.0, not "no sample"
    monkeypatch.setattr(TierArrays, "grow", grow_with_garbage)
    rings = _rings()
    slots = [rings.take() for _ in range(MIN_BLOCK + 1)]      # the last one opens a second block
    assert len(rings.tiers[0].blocks) == 2 and rings.cleared.all()
    _add(rings, [(s, 3.0, 2.0, 4.0) for s in (slots[0], slots[-1])])
    # Buckets 0-2 are in the read's range: unwritten memory would read as samples of 0.0.
    assert [rings.series(s).read(0, 100)["rate"] for s in (slots[0], slots[-1])] == [[2.0], [2.0]]


def test_with_prefill_the_next_block_is_made_off_the_loop_and_taken_whole() -> None:
    rings = TaskRings(HistoryConfig(step_s=1.0, recent_s=5.0, long_step_s=10.0, long_s=60.0), RATE_LEVEL,
                      prefill=True)
    first = [rings.take() for _ in range(MIN_BLOCK)]        # the first block; the next one is being made
    assert rings._prefill is not None and rings._prefill._done.wait(10)
    spare = rings._prefill._blocks[0]
    second = rings.take()
    assert rings.tiers[0].blocks[1] is spare and rings.cleared.all()
    assert (rings.tiers[0].blocks[1] == NAN_BF16).all() and (rings.tiers[1].blocks[1] == NAN_BF16).all()
    _add(rings, [(first[0], 3.0, 1.0, 1.0), (second, 3.0, 2.0, 4.0)])
    assert [rings.series(s).read(0, 100)["rate"] for s in (first[0], second)] == [[1.0], [2.0]]


def test_a_prefilled_block_of_another_size_or_tier_count_is_dropped() -> None:
    prefill = BlockPrefill()
    prefill.prepare(16, [(5, 16, 2)])
    assert prefill._done.wait(10)
    assert prefill.take(32, 1) is None and prefill.take(16, 1) is None    # the wrong size drops it
    prefill.prepare(16, [(5, 16, 2)])
    assert prefill._done.wait(10) and prefill.take(16, 2) is None           # another number of tiers


def test_a_view_of_a_slot_given_back_and_taken_again_changes_nothing() -> None:
    rings = _rings()
    slot = rings.take()
    old = rings.series(slot)
    _add(rings, [(slot, 30.0, 1.0, 1.0)])
    rings.give_back(slot)
    assert rings.take() == slot
    _add(rings, [(slot, 31.0, 2.0, 2.0)])
    old.tiers[0].flushed = 10**6               # a flush of the old task finishing late
    old.dirty = False
    new = rings.series(slot)
    assert new.tiers[0].flushed == 31 and new.dirty            # the new task's first bucket, not the stale mark


def test_a_slot_fits_the_memory_budget_at_default_retention() -> None:
    rings = TaskRings(HistoryConfig())
    for _ in range(100):
        rings.take()
    assert rings.nbytes() / rings.used <= 20 * 1024      # the budget per running task, unused slots counted


def test_a_new_tasks_first_flush_starts_at_its_first_bucket_not_its_whole_ring() -> None:
    rings = TaskRings(HistoryConfig(step_s=1.0))      # default retention: 600 and 288 rows
    slot = rings.take()
    _add_task(rings, slot, [1000.0, 1001.0, 1002.0])
    rings.settle([slot])
    firsts = [tier.unflushed(settled=True) for tier in rings.series(slot).tiers]
    assert [(first, len(rows)) for first, rows in firsts] == [(1000, 3), (3, 1)]     # not 600 and 288 rows


def _add_task(rings: TaskRings, slot: int, times: list[float]) -> None:
    width = len(rings.schema.fields)
    rings.add(np.full(len(times), slot), np.array(times), np.ones((len(times), width), dtype=np.float32))
