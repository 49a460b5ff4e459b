"""Sync access to etcd for sync code: a thread with its own asyncio loop and its own EtcdKV.

The identity code (users, joins, revocations) is sync: the master's gRPC servicers call it
on the master's loop, and the offline commands from plain functions. Neither may use the
master's EtcdKV from there (its channels belong to the master's loop, which would be
blocked waiting), so the bridge keeps its own channels on its own loop and the caller
blocks until the coroutine is done. Joins and token creation are rare: a few ms of blocked
loop is the price of keeping the callers simple.

The master's lease renewals and state transactions use it too, asynchronously (`run`,
`spawn`): on a loop busy with thousands of agents, each await of an etcd answer waited
its turn behind them (~45 ms a transaction at 2,000 agents, renewals up to 1.5 s)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Awaitable, Callable, TypeVar

from tcluster.etcd.kv import EtcdKV, EtcdUnavailable
from tcluster.etcd.tls import EtcdTLS

T = TypeVar("T")
DEFAULT_CALL_TIMEOUT_S = 15.0   # room for a few calls, each trying every member once


class EtcdBridge:
    def __init__(self, endpoints: list[str], timeout_s: float = 2.0, tls: EtcdTLS | None = None) -> None:
        self.endpoints = list(endpoints)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="etcd-bridge", daemon=True)
        self._thread.start()
        self._closed = False

        async def make() -> EtcdKV:    # its channels must be made on the loop that uses them
            return EtcdKV(self.endpoints, timeout_s, tls)
        try:
            self.kv = asyncio.run_coroutine_threadsafe(make(), self._loop).result()
        except BaseException:       # e.g. a TLS file gone since the URL was checked
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5.0)
            raise

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def call(self, fn: Callable[[EtcdKV], Awaitable[T]], timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> T:
        """Runs fn(kv) on the bridge's loop and returns its result (or raises its error)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("EtcdBridge.call from the bridge's own thread would wait for itself")
        if self._closed:
            raise EtcdUnavailable("the etcd connection is closed")

        async def run() -> T:
            return await fn(self.kv)
        future = asyncio.run_coroutine_threadsafe(run(), self._loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise EtcdUnavailable(f"etcd did not answer within {timeout_s:.0f} s; is a quorum of "
                                  f"{','.join(self.endpoints)} up?") from None

    async def run(self, fn: Callable[[EtcdKV], Awaitable[T]]) -> T:
        """From another loop: awaits fn(kv) run on the bridge's loop. The master's lease
        renewals and state writes go this way, so a busy master loop delays neither."""
        if self._closed:
            raise EtcdUnavailable("the etcd connection is closed")

        async def call() -> T:
            return await fn(self.kv)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call(), self._loop))

    def spawn(self, coro: Awaitable[None]) -> concurrent.futures.Future[None]:
        """Runs a background coroutine on the bridge's loop (cancel the returned future)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)   # type: ignore[arg-type]

    def close(self) -> None:
        """Idempotent; closes the channels, then stops the thread."""
        if self._closed:
            return
        self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(self.kv.close(), self._loop).result(5.0)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass     # stopping anyway: the thread is a daemon
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)
        if not self._thread.is_alive():
            self._loop.close()
