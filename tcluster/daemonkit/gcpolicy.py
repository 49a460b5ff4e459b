"""The master's garbage-collector policy (issue 38): young collections rarer, full ones on
a timer instead of CPython's promotion count.

Why: a master holding 20,000 tasks has a heap of about 1 GB, and a full collection walks
all of it with the GIL held: 230-380 ms each on a 2-core host, 13 of them in a 30 s
burst and churn at 1,000 tasks/s (bench/cluster_scale.py). They found 0-95 objects
each: the master's state is acyclic records that reference counting frees. CPython 3.11
starts a full collection once the objects *promoted* since the last one pass a quarter of
the long-lived ones, counting those that have died since, so a master whose tasks come
and go pays for it over and over. Those pauses were the churn's latency tail: every reply
and launch waits behind them.

So: the young generation collects every YOUNG_THRESHOLD allocations (700 by default, which
promotes short-lived objects that would have died by reference count a moment later), and
the full collection runs every FULL_EVERY_S on the event loop (`full_collections`), where
what it finds is logged. Cyclic garbage that lives long enough to be promoted waits at
most that long."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

log = logging.getLogger(__name__)

YOUNG_THRESHOLD = 10_000
MIDDLE_THRESHOLD = 20
# CPython counts middle collections against this; never reached, so only the timer starts
# a full collection.
NO_AUTOMATIC_FULL = 2**31 - 1
FULL_EVERY_S = 300.0


def install() -> tuple[int, int, int]:
    """Sets the thresholds; returns the ones before, for a caller that puts them back."""
    before = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, NO_AUTOMATIC_FULL)
    return before


def collect_all() -> tuple[int, float]:
    """One full collection: (objects found unreachable, seconds it held the loop)."""
    started = time.perf_counter()
    found = gc.collect()
    return found, time.perf_counter() - started


async def full_collections(every_s: float = FULL_EVERY_S) -> None:
    """Runs until cancelled: a full collection every `every_s`."""
    while True:
        await asyncio.sleep(every_s)
        found, seconds = collect_all()
        level = logging.INFO if seconds > 1.0 else logging.DEBUG
        log.log(level, "full garbage collection: %d unreachable objects in %.0f ms", found, seconds * 1e3)
