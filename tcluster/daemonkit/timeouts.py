"""`wait_for` that never loses a cancellation, for every daemon loop.

On Python 3.11, `asyncio.wait_for(aw, t)` returns aw's result when aw completes in the
same loop turn as a cancel of the task awaiting it: the cancel is lost (CPython gh-86296;
3.12 rebuilt wait_for on `asyncio.timeout`). A loop of the form
`while True: await asyncio.wait_for(event.wait(), t)` then keeps turning after `stop()`
cancelled it, and `stop()`'s gather waits forever: tcl-gm's stop hung a CI run that way
when a placement wake-up and the stop met in one turn. `asyncio.timeout` cancels aw in
the awaiting task itself and tells its own expiry from a cancel from outside, so both
are kept. tests/unit/test_timeouts.py holds the race and keeps asyncio.wait_for out of
the daemons."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_for(aw: Awaitable[T], timeout_s: float | None) -> T:
    """aw's result, or TimeoutError after timeout_s (None: no limit); a cancel of the
    caller always propagates, whatever aw did in the same turn."""
    async with asyncio.timeout(timeout_s):
        return await aw
