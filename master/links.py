"""One connected agent: an outbound queue and the log requests waiting for answers."""

from __future__ import annotations

import asyncio

from tcluster.master.core.actions import LogPiece
from tcluster.master.core.events import Outbound

_CLOSED = object()


class AgentLink:
    def __init__(self, node: str) -> None:
        self.node = node
        self._outbox: asyncio.Queue[object] = asyncio.Queue()
        self._log_waiters: dict[str, asyncio.Queue[LogPiece]] = {}
        self.closed = False

    def send(self, message: Outbound) -> None:
        if not self.closed:
            self._outbox.put_nowait(message)

    async def next_outbound(self) -> Outbound | None:
        item = await self._outbox.get()
        return None if item is _CLOSED else item  # type: ignore[return-value]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._outbox.put_nowait(_CLOSED)
            for queue in self._log_waiters.values():
                queue.put_nowait(LogPiece("", b"", eof=True, error=f"node {self.node} disconnected"))

    def open_log(self, request_id: str) -> asyncio.Queue[LogPiece]:
        queue: asyncio.Queue[LogPiece] = asyncio.Queue()
        self._log_waiters[request_id] = queue
        return queue

    def close_log(self, request_id: str) -> None:
        self._log_waiters.pop(request_id, None)

    def deliver_log(self, piece: LogPiece) -> None:
        queue = self._log_waiters.get(piece.request_id)
        if queue is not None:
            queue.put_nowait(piece)
