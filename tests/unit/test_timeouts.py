"""tcluster.daemonkit.timeouts.wait_for keeps a cancel that meets the awaited thing's completion in
one loop turn (stdlib asyncio.wait_for on 3.11 drops it: a daemon loop then outlives its
stop, as tcl-gm's did in CI), and the daemons use it rather than asyncio.wait_for."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tcluster.daemonkit.timeouts import wait_for

REPO = Path(__file__).resolve().parents[2]


async def cancel_as_the_event_fires(wait: Callable[[Awaitable[bool], float], Awaitable[bool]]) -> tuple[bool, int]:
    """A daemon loop (`while True: await wait(event.wait(), t)`) cancelled in the same turn
    as its event is set, as stop() can meet a wake-up. Returns (stopped, turns taken)."""
    event, turns = asyncio.Event(), 0

    async def loop() -> None:
        nonlocal turns
        while True:
            await wait(event.wait(), 60.0)
            event.clear()
            turns += 1

    task = asyncio.create_task(loop())
    for _ in range(3):
        await asyncio.sleep(0)          # the loop is now waiting on the event
    event.set()
    task.cancel()
    for _ in range(20):
        await asyncio.sleep(0)
    stopped = task.done()
    task.cancel()                       # a lost cancel: end the loop for the test's sake
    await asyncio.gather(task, return_exceptions=True)
    return stopped, turns


def test_a_cancel_in_the_same_turn_as_the_event_stops_the_loop() -> None:
    stopped, turns = asyncio.run(cancel_as_the_event_fires(wait_for))
    assert stopped and turns == 0


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12's asyncio.wait_for keeps the cancel")
def test_the_race_is_real_stdlib_wait_for_loses_that_cancel_on_3_11() -> None:
    # The scenario above is the one that hung: on 3.11 the stdlib returns the event's result
    # and the loop takes another turn instead of stopping.
    stopped, turns = asyncio.run(cancel_as_the_event_fires(asyncio.wait_for))
    assert not stopped and turns == 1


def test_result_and_timeout() -> None:
    async def main() -> None:
        assert await wait_for(asyncio.sleep(0, result=7), 5.0) == 7
        assert await wait_for(asyncio.sleep(0, result=8), None) == 8
        with pytest.raises(TimeoutError):
            await wait_for(asyncio.Event().wait(), 0.01)
        queue: asyncio.Queue[int] = asyncio.Queue()
        with pytest.raises(TimeoutError):
            await wait_for(queue.get(), 0.01)
        queue.put_nowait(3)             # a timed-out get took nothing
        assert queue.get_nowait() == 3
    asyncio.run(main())


def test_the_daemons_use_it_not_asyncio_wait_for() -> None:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    offenders = [path for path in listed.stdout.split()
                 if not path.startswith(("tests/", "bench/")) and path != "tcluster/daemonkit/timeouts.py"   # says why
                 and "asyncio.wait_for(" in (REPO / path).read_text()]
    assert offenders == [], f"use tcluster.daemonkit.timeouts.wait_for (keeps cancels on 3.11) in {offenders}"
