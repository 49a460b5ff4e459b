"""Group commit: the durable rows of many steps in one store transaction (SQLite; etcd
packs whole steps into transactions, master/store/etcdplan.py), written off the event
loop, with every step's effects held back until its rows are on disk.

The service applies a step to memory as soon as the core computes it (so the next event
sees it), queues its rows here, and the step's actions — replies to clients, launches,
kills, acknowledgements — go out only once the batch holding it is durable
(synchronous=FULL). Nothing outside the master can tell the difference from writing
each step first, but one fsync now covers every step that arrived meanwhile.

The store answers for each step: a step that was not written (refused for itself, or
after a failure) was never visible outside: its waiter gets its own error, its actions
are dropped, and `on_failure` rebuilds the memory state from the store (fail-stop, then
recover), so memory never runs ahead of the disk for long. The steps of the same batch
that were written go out as usual: one user's bad change fails no one else's."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Callable

from tcluster.domain.errors import Unavailable
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
                outcomes = await self._commit(durable)
                self.batches += bool(durable)
                self.steps += sum(o is None for o in outcomes)
                failed = {id(p): o for p, o in zip(durable, outcomes) if o is not None}
                if failed:
                    self._settle(batch, failed)
                    return
                for pending in batch:
                    self._send(pending.actions)
                    if not pending.done.done():
                        pending.done.set_result(None)
        finally:
            self._writing = False

    async def _commit(self, durable: list[_Pending]) -> list[Exception | None]:
        """The store's outcome for each step; every step fails alike if it raised."""
        if not durable:
            return []
        try:
            outcomes = await self.store.commit([(p.step, p.new_jobs) for p in durable])
            if outcomes is None:       # a store that answers for the batch as a whole
                return [None] * len(durable)
            if len(outcomes) != len(durable):
                raise RuntimeError(f"the store answered for {len(outcomes)} of {len(durable)} steps")
            return list(outcomes)
        except Exception as error:    # StoreError, NotLeader (etcd), or a bug: no waiter may hang
            return [_as_unavailable(error)] * len(durable)

    def _settle(self, batch: list[_Pending], failed: dict[int, Exception]) -> None:
        """Some steps of the batch were not written: those that were go out; each of the
        others gets its own error; memory is rebuilt from the store, so the steps that came
        meanwhile (computed on the memory being dropped) are not made either."""
        first = next(n for n, p in enumerate(batch) if id(p) in failed)
        later = StoreError("not written: an earlier change failed and the master reloaded its state; send it again")
        for n, pending in enumerate(batch):
            error = failed.get(id(pending), later if n > first and not pending.step.durable else None)
            if error is None:
                self._send(pending.actions)
                if not pending.done.done():
                    pending.done.set_result(None)
            else:
                _fail_one(pending, error)
        reason = next(iter(failed.values()))
        log.error("%d change(s) not written (%s)", len(failed), reason)
        self._fail(self._queue, later)
        self._queue = []

    def _fail(self, lost: list[_Pending], error: Exception) -> None:
        if lost:
            log.error("%s; %d change(s) not made", error, len(lost))
        for pending in lost:
            _fail_one(pending, error)
        self._on_failure()


def _as_unavailable(error: Exception) -> Exception:
    return error if isinstance(error, Unavailable) else StoreError(f"state write failed: {error!r}")


def _fail_one(pending: _Pending, error: Exception) -> None:
    if not pending.done.done():
        pending.done.set_exception(error)
        pending.done.exception()     # retrieved: a fire-and-forget step must not warn
