"""One connected agent: an outbound queue and the log requests waiting for answers.

Log data is flow-controlled (review finding 1): each request's pieces wait in a LogStream
bounded by the window the agent was given, and the agent sends more only when the master
grants credit, which it does when its client takes a piece. A client that stops reading
therefore stops the agent's reading of the file: the master's memory per stream stays at
most `window` chunks whatever the client does."""

from __future__ import annotations

import asyncio
from collections import deque

from tcluster.master.core.actions import LogPiece
from tcluster.master.core.execio import ExecPiece
from tcluster.master.execrelay import ExecChannel
from tcluster.master.core.events import Outbound

_CLOSED = object()


class LogStream:
    """The pieces of one log request not yet taken by its client, at most `window`."""

    def __init__(self, request_id: str, window: int) -> None:
        self.request_id = request_id
        self.window = window
        self._pieces: deque[LogPiece] = deque()
        self._end: LogPiece | None = None        # the last piece: a disconnect or an overrun
        self._ready = asyncio.Event()

    def deliver(self, piece: LogPiece) -> None:
        if self._end is not None:
            return
        if len(self._pieces) >= self.window:
            # The agent ignored its window (a bug or an agent without flow control): end the
            # stream rather than buffer without bound, and drop what it held.
            self._pieces.clear()
            self.end(f"the node sent more than the {self.window} log chunks it was granted")
            return
        self._pieces.append(piece)
        self._ready.set()

    def end(self, error: str) -> None:
        if self._end is None:
            self._end = LogPiece(self.request_id, b"", eof=True, error=error)
            self._ready.set()

    def held(self) -> int:
        return len(self._pieces)

    async def get(self) -> LogPiece:
        """The next piece; after the pieces, the end (if there is one)."""
        while not self._pieces and self._end is None:
            self._ready.clear()
            await self._ready.wait()
        return self._pieces.popleft() if self._pieces else self._end  # type: ignore[return-value]


class AgentLink:
    def __init__(self, node: str, features: frozenset[str] = frozenset()) -> None:
        self.node = node
        self.features = features          # what the agent said it understands (tcluster/wire/features.py)
        self._outbox: asyncio.Queue[object] = asyncio.Queue()
        self._log_waiters: dict[str, LogStream] = {}
        self._execs: dict[str, ExecChannel] = {}
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
            for stream in self._log_waiters.values():
                stream.end(f"node {self.node} disconnected")
            for channel in self._execs.values():
                channel.end(f"node {self.node} disconnected (its agent restarted, or the master lost it); "
                            "the command was killed there")

    def open_log(self, request_id: str, window: int) -> LogStream:
        stream = LogStream(request_id, window)
        self._log_waiters[request_id] = stream
        return stream

    def close_log(self, request_id: str) -> None:
        self._log_waiters.pop(request_id, None)

    def deliver_log(self, piece: LogPiece) -> None:
        stream = self._log_waiters.get(piece.request_id)
        if stream is not None:
            stream.deliver(piece)

    def open_exec(self, channel: ExecChannel) -> None:
        if self.closed:
            channel.end(f"node {self.node} disconnected")
        self._execs[channel.exec_id] = channel

    def close_exec(self, exec_id: str) -> None:
        self._execs.pop(exec_id, None)

    def deliver_exec(self, piece: ExecPiece) -> None:
        channel = self._execs.get(piece.exec_id)
        if channel is not None:
            channel.deliver(piece)
