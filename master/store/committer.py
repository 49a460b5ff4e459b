"""Group commit: the durable rows of many steps in one store transaction (SQLite; etcd
splits a large batch, master/store/etcd.py), written off the event loop, with every step's effects held back until its rows are on disk.

The service applies a step to memory as soon as the core computes it (so the next event
sees it), queues its rows here, and the step's actions — replies to clients, launches,
kills, acknowledgements — go out only once the batch holding it is durable
(synchronous=FULL). Nothing outside the master can tell the difference from writing
each step first, but one fsync now covers every step that arrived meanwhile.

If a batch cannot be written, nothing of it (or of any later step) was ever visible
outside: its waiters get StoreError, its actions are dropped, and `on_failure` rebuilds
the memory state from the store (fail-stop, then recover), so memory never runs ahead
of the disk for long."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Callable

from tcluster.errors import Unavailable
from tcluster.master.core.events import Action, Step
from tcluster.master.store.base import StateStore
from tcluster.master.store.sqlite import StoreError

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    step: Step
    new_jobs: list[str]
    done: asyncio.Future[None]
    actions: list[Action] = field(default_factory=list)


class Committer:
    def __init__(self, store: StateStore, send: Callable[[list[Action]], None], on_failure: Callable[[], None]) -> None:
        self.store = store
        self._send = send
        self._on_failure = on_failure
        self._queue: list[_Pending] = []
        self._writing = False
        self.batches = 0
        self.steps = 0

    def add(self, step: Step, new_jobs: list[str]) -> asyncio.Future[None]:
        """Queues a step applied in memory; its future completes once its rows are durable."""
        loop = asyncio.get_running_loop()
        if not step.durable and not self._writing and not self._queue:
            # Nothing to write and nothing ahead of it (e.g. a heartbeat): effects go now.
            self._send(step.actions)
            done: asyncio.Future[None] = loop.create_future()
            done.set_result(None)
            return done
        done = loop.create_future()
        self._queue.append(_Pending(step, new_jobs, done, list(step.actions)))
        if not self._writing:
            self._writing = True
            loop.call_soon(self._start)
        return done

    @property
    def idle(self) -> bool:
        return not self._writing and not self._queue

    def _start(self) -> None:
        asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                durable = [p for p in batch if p.step.durable]
                try:
                    if durable:
                        await self.store.commit([(p.step, p.new_jobs) for p in durable])
                except Exception as error:    # StoreError, NotLeader (etcd), or a bug: no waiter may hang
                    failure = error if isinstance(error, Unavailable) else StoreError(f"state write failed: {error!r}")
                    self._fail(batch + self._queue, failure)
                    self._queue = []
                    return
                self.batches += bool(durable)
                self.steps += len(durable)
                for pending in batch:
                    self._send(pending.actions)
                    if not pending.done.done():
                        pending.done.set_result(None)
        finally:
            self._writing = False

    def _fail(self, lost: list[_Pending], error: Unavailable) -> None:
        log.error("%s; %d change(s) not made", error, len(lost))
        for pending in lost:
            if not pending.done.done():
                pending.done.set_exception(error)
                pending.done.exception()     # retrieved: a fire-and-forget step must not warn
        self._on_failure()
