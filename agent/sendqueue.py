"""What the agent sends up its stream, in two lanes, and the credit of each log request.

Heartbeats and task events go in the control lane, which the writer always empties first:
log data never delays them (a node with a busy `tcl logs -f` must not look DOWN). Log data
goes in its own lane of a few slots; a request's sender waits for room there, and before
that for credit from the master (LogRequest.window, then LogCredit), so a client that stops
reading stops the agent reading the file (review finding 1). The agent's memory for logs is
LOG_SLOTS chunks plus one chunk per request, whatever the master or its clients do."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from tcluster.v1 import agent_pb2

LOG_SLOTS = 4                     # log messages queued for the stream at most (64 KiB each)


class SendQueue:
    """Two lanes to one writer: control first, then log data (bounded)."""

    def __init__(self, log_slots: int = LOG_SLOTS) -> None:
        self._control: deque[agent_pb2.AgentMessage] = deque()
        self._logs: deque[agent_pb2.AgentMessage] = deque()
        self._log_slots = log_slots
        self._ready = asyncio.Event()       # something to send
        self._room = asyncio.Event()        # a log slot free
        self._room.set()

    def put_control(self, message: agent_pb2.AgentMessage) -> None:
        self._control.append(message)
        self._ready.set()

    async def put_log(self, message: agent_pb2.AgentMessage) -> None:
        while len(self._logs) >= self._log_slots:
            self._room.clear()
            await self._room.wait()
        self._logs.append(message)
        self._ready.set()

    async def get(self) -> agent_pb2.AgentMessage:
        while not self._control and not self._logs:
            self._ready.clear()
            await self._ready.wait()
        if self._control:
            return self._control.popleft()
        self._room.set()
        return self._logs.popleft()


class Credit:
    """How many more LogData one request may send; a window of 0 (an older master): no limit."""

    def __init__(self, window: int) -> None:
        self._left = window
        self._limited = window > 0
        self._granted = asyncio.Event()

    def grant(self, chunks: int) -> None:
        self._left += max(0, chunks)
        self._granted.set()

    async def take(self) -> None:
        while self._limited and self._left <= 0:
            self._granted.clear()
            await self._granted.wait()
        self._left -= 1


class LogSends:
    """The log requests a session is answering: each one's sender task and credit."""

    def __init__(self) -> None:
        self._running: dict[str, tuple[asyncio.Task[None], Credit]] = {}

    def start(self, request_id: str, window: int,
              sender: Callable[[Credit], Coroutine[Any, Any, None]]) -> None:
        credit = Credit(window)
        task = asyncio.create_task(sender(credit), name=f"log-{request_id[:16]}")
        self._running[request_id] = (task, credit)
        task.add_done_callback(lambda _: self._running.pop(request_id, None))

    def credit(self, request_id: str, chunks: int, cancel: bool) -> None:
        """More credit, or the end of a request whose client left (unknown ids: ignored)."""
        entry = self._running.get(request_id)
        if entry is None:
            return
        if cancel:
            entry[0].cancel()
        else:
            entry[1].grant(chunks)

    def cancel_all(self) -> None:
        for task, _ in list(self._running.values()):
            task.cancel()

    def __len__(self) -> int:
        return len(self._running)
