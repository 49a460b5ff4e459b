"""The agent's session ended by its silence watchdog becomes a reconnect (ConnectionError);
a stop of the agent that arrives in the same turn stays a stop (it became a reconnect, and
the stopping agent could register again and take launches until cancelled once more)."""

from __future__ import annotations

import asyncio

import pytest

from tcluster.agent.daemon import Agent


class _Session:
    """What Agent._watched_session reads: a session that never ends by itself."""

    def __init__(self) -> None:
        self.last_message = 0.0
        self._stale = False
        self._session_task: asyncio.Task[None] | None = None

    async def _session(self) -> None:
        await asyncio.Event().wait()

    def _stale_after(self) -> float:
        return 1.0


async def _run(stop_too: bool) -> BaseException:
    state = _Session()
    outer = asyncio.create_task(Agent._watched_session(state))    # type: ignore[arg-type]
    for _ in range(3):
        await asyncio.sleep(0)
    assert state._session_task is not None
    state._stale = True                       # the watchdog: the master went silent
    state._session_task.cancel()
    if stop_too:
        outer.cancel()                        # the agent's stop, in the same turn
    try:
        await outer
    except BaseException as error:            # noqa: BLE001 - the outcome is the point
        return error
    raise AssertionError("the session ended without an error")


def test_the_watchdog_alone_ends_the_session_for_a_reconnect() -> None:
    assert isinstance(asyncio.run(_run(stop_too=False)), ConnectionError)


def test_a_stop_in_the_same_turn_as_the_watchdog_stays_a_stop() -> None:
    assert isinstance(asyncio.run(_run(stop_too=True)), asyncio.CancelledError)


@pytest.mark.parametrize("stop_too", [False, True])
def test_the_session_state_is_reset(stop_too: bool) -> None:
    async def main() -> None:
        state = _Session()
        outer = asyncio.create_task(Agent._watched_session(state))    # type: ignore[arg-type]
        for _ in range(3):
            await asyncio.sleep(0)
        state._stale = True
        state._session_task.cancel()          # type: ignore[union-attr]
        if stop_too:
            outer.cancel()
        await asyncio.gather(outer, return_exceptions=True)
        assert state._stale is False and state._session_task is None
    asyncio.run(main())
