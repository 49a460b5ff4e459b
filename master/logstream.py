"""Streaming one task's log from its node to a client, with flow control end to end.

The agent may send at most LOG_WINDOW_CHUNKS pieces (its chunks are at most 64 KiB) ahead
of the client: the master grants one more each time its client takes one, and cancels the
request when the client leaves. A client that stops reading therefore stops the agent
reading the file, and the master holds at most the window per stream (review finding 1).
Each open stream may hold its window for as long as its client stalls (a follow for as
long as the task runs), so each user may have at most `--log-streams-per-user` open at once:
the master's memory for logs is bounded per user, whatever the clients do."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

from tcluster.domain.errors import FailedPrecondition, ResourceExhausted, Unavailable
from tcluster.master.core.actions import FetchLog, LogCredit
from tcluster.master.links import AgentLink
from tcluster.daemonkit.timeouts import wait_for

LOG_WINDOW_CHUNKS = 8            # x 64 KiB: at most 512 KiB of one stream in the master
LOG_PIECE_TIMEOUT_S = 15.0       # a following agent sends an empty piece every 5 s


class StreamCap:
    """Counts each user's open log streams; one over the cap is refused."""

    def __init__(self, per_user: int) -> None:
        self.per_user = per_user
        self._open: dict[str, int] = {}

    def open(self, user: str) -> int:
        return self._open.get(user, 0)

    @contextmanager
    def hold(self, user: str) -> Iterator[None]:
        if self.open(user) >= self.per_user:
            raise ResourceExhausted(
                f"{user} already has {self.per_user} log streams open, the most one user may at once "
                f"(--log-streams-per-user); end one first")
        self._open[user] = self.open(user) + 1
        try:
            yield
        finally:
            left = self._open.pop(user) - 1
            if left:
                self._open[user] = left


async def stream_log(link: AgentLink, fetch: FetchLog) -> AsyncIterator[bytes]:
    """The data of `fetch` from `link`'s node, asking for more only as it is taken."""
    stream = link.open_log(fetch.request_id, fetch.window)
    link.send(fetch)
    ended = False
    try:
        while True:
            piece = await wait_for(stream.get(), LOG_PIECE_TIMEOUT_S)
            ended = piece.eof
            if not ended:
                link.send(LogCredit(fetch.request_id, chunks=1))   # taken: room for one more
            if piece.error:
                raise FailedPrecondition(f"logs of {fetch.task_id}: {piece.error}")
            if piece.data:
                yield piece.data
            if ended:
                return
    except asyncio.TimeoutError:
        raise Unavailable(f"node {link.node} did not send the logs of {fetch.task_id} in time") from None
    finally:
        link.close_log(fetch.request_id)
        if not ended:                    # the client left (or timed out): the node stops reading
            link.send(LogCredit(fetch.request_id, cancel=True))
