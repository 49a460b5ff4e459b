"""ringflush: a flush's chunks of many slots at once are the ones each slot's
SlotTier.unflushed gives, byte for byte; marks land only on slots still held by the
task they were read for; a failed write leaves them dirty."""

from __future__ import annotations

import random

import numpy as np

from tcluster.master.usage.history import MAX, MEAN, HistoryConfig, Schema
from tcluster.master.usage.ringflush import mark_dirty, mark_flushed, unflushed_chunks
from tcluster.master.usage.taskrings import TaskRings

RATE_LEVEL = Schema(("rate", "level", "other"), (MEAN, MAX, MAX))


def _rings() -> TaskRings:
    return TaskRings(HistoryConfig(step_s=1.0, recent_s=7.0, long_step_s=4.0, long_s=24.0), RATE_LEVEL)


def _feed(rings: TaskRings, rng: random.Random, slots: list[int], t: float) -> None:
    chosen = sorted(s for s in slots if rng.random() < 0.8)        # some slots skip: gaps
    rows = np.array([[rng.random(), rng.random() * 100, rng.random()] for _ in chosen], dtype=np.float32)
    if chosen:
        rings.add(np.array(chosen, dtype=np.int64), np.full(len(chosen), t), rows)


def _one_by_one(rings: TaskRings, slots: list[int]) -> list[tuple[int, int, int, int, bytes]]:
    out = []
    for slot in slots:
        for number, tier in enumerate(rings.series(slot).tiers):
            pending = tier.unflushed(settled=True)
            if pending is not None:
                first, rows = pending
                out.append((slot, number, first, first + len(rows) - 1, rows.tobytes()))
    return sorted(out)


def _at_once(rings: TaskRings, slots: list[int]) -> list[tuple[int, int, int, int, bytes]]:
    asked = np.array(slots, dtype=np.int64)
    out = []
    for chunk in unflushed_chunks(rings, asked):
        for i, first, last, rows in zip(chunk.index.tolist(), chunk.first.tolist(), chunk.last.tolist(), chunk.rows):
            out.append((slots[i], chunk.tier, first, last, rows))
    return sorted(out)


def test_the_chunks_of_many_slots_are_each_slots_own_through_wraps_gaps_blocks_and_flushes() -> None:
    rng = random.Random(5)
    rings = _rings()
    slots = [rings.take() for _ in range(60)]           # several blocks (16, then an eighth more each)
    assert len(rings.starts) > 3
    compared = 0
    for second in range(40):                            # past both rings' lengths
        _feed(rings, rng, slots, 100.0 + second + rng.random() * 0.5)
        if second % 3 == 2:
            asked = rng.sample(slots, 25)
            rings.settle(asked)
            want, got = _one_by_one(rings, asked), _at_once(rings, asked)
            assert got == want
            compared += len(want)
            mark_flushed(rings, unflushed_chunks(rings, np.array(asked, dtype=np.int64)))
            # what is on disk is not asked again: only each slot's newest bucket (it may still grow)
            assert all(first == last for _, _, first, last, _ in _at_once(rings, asked))
        if second == 20:                                # a slot given back and taken again: a new task
            rings.give_back(slots[3])
            assert rings.take() == slots[3]
    assert compared > 100


def test_a_mark_skips_a_slot_given_back_meanwhile_and_a_failed_write_leaves_them_dirty() -> None:
    rings = _rings()
    a, b = rings.take(), rings.take()
    _feed(rings, random.Random(1), [a, b], 10.0)
    _feed(rings, random.Random(2), [a, b], 11.0)
    asked = np.array([a, b], dtype=np.int64)
    rings.settle(asked)
    chunks = unflushed_chunks(rings, asked)
    owners = rings.owners[asked].copy()
    rings.dirty[asked] = False
    mark_dirty(rings, asked, owners)
    assert rings.dirty[asked].all()
    rings.give_back(b)
    assert rings.take() == b                            # another task's now
    rings.dirty[asked] = False
    mark_dirty(rings, asked, owners)
    assert rings.dirty[a] and not rings.dirty[b]
    mark_flushed(rings, chunks)
    tier = rings.tiers[0]
    assert tier.flushed[a] == tier.last[a] and tier.flushed[b] == -1
