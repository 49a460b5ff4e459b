"""The master's collector policy (tcluster/daemonkit/gcpolicy.py): thresholds set and put
back, and full collections on the timer find what reference counting cannot free."""

from __future__ import annotations

import asyncio
import gc

from tcluster.daemonkit import gcpolicy


def test_install_makes_young_collections_rarer_and_leaves_full_ones_to_the_timer() -> None:
    before = gcpolicy.install()
    try:
        young, middle, full = gc.get_threshold()
        assert young == gcpolicy.YOUNG_THRESHOLD > before[0]
        assert middle == gcpolicy.MIDDLE_THRESHOLD
        assert full == gcpolicy.NO_AUTOMATIC_FULL
    finally:
        gc.set_threshold(*before)


def test_the_timer_collects_cycles_and_stops_when_cancelled() -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self

    def alive() -> int:
        return sum(isinstance(o, Node) for o in gc.get_objects())

    async def run() -> None:
        for _ in range(50):
            Node()                          # unreachable cycles: only a collection frees them
        assert alive() == 50
        task = asyncio.ensure_future(gcpolicy.full_collections(every_s=0.01))
        await asyncio.sleep(0.2)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
    gc.disable()                            # no automatic collection: the timer's alone
    try:
        asyncio.run(run())
        assert alive() == 0
    finally:
        gc.enable()
