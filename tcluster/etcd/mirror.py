"""A warm copy of every key under an etcd prefix, kept by one watch (the master's cluster
state and auth; tcl-gm's federation keys).

Standbys keep it from the moment they start, so taking over needs no range reads: the
new leader waits until the copy has reached the revision at which it won, and builds
its state from memory. The leader keeps it too (its own writes arrive through the watch,
and are also applied at once when a transaction succeeds, so a read right after a write
sees it). Keys are grouped by "table", the key's parent path after the prefix
(`state/jobs`, `state/tasks/<job>`, `auth/users`), so a lookup never scans other tables."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from tcluster.etcd.kv import Compacted, EtcdKV, EtcdUnavailable, WatchEvent
from tcluster.daemonkit.timeouts import wait_for

log = logging.getLogger(__name__)
Listener = Callable[[str, bytes | None, int], None]


def table_of(relative: str) -> str:
    """The key's parent: 'state/jobs/j1' -> 'state/jobs', 'state/tasks/j1/000003' ->
    'state/tasks/j1' (a job's tasks are one table), 'leader' -> ''."""
    return relative.rpartition("/")[0]


class Mirror:
    def __init__(self, kv: EtcdKV, prefix: str) -> None:
        self.kv = kv
        self.prefix = prefix.rstrip("/") + "/"
        self.revision = 0
        self._tables: dict[str, dict[str, tuple[int, bytes]]] = {}
        self._listeners: list[tuple[str, Listener]] = []
        self._advanced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ---- reads (sync; keys relative to the prefix) ----

    def get(self, relative: str) -> bytes | None:
        entry = self._tables.get(table_of(relative), {}).get(relative)
        return entry[1] if entry is not None else None

    def items(self, table: str) -> list[tuple[str, bytes]]:
        """(relative key, value) of one table, in key order."""
        return sorted((key, entry[1]) for key, entry in self._tables.get(table, {}).items())

    def count(self, table: str) -> int:
        return len(self._tables.get(table, {}))

    def tables(self, parent: str) -> list[str]:
        """The tables under a parent: tables('state/tasks') -> ['state/tasks/j1', ...]."""
        head = parent.rstrip("/") + "/"
        return sorted(name for name, rows in self._tables.items() if name.startswith(head) and rows)

    def listen(self, relative_prefix: str, listener: Listener) -> None:
        """Called with (relative key, value or None, revision) for each change under it."""
        self._listeners.append((relative_prefix, listener))

    # ---- feeding ----

    async def start(self) -> None:
        await self._load()
        self._task = asyncio.create_task(self._follow(), name="etcd-mirror")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            # gather: the task's own end (cancelled, or an error) is dropped, but a cancel of
            # the caller itself still propagates (a bare except would swallow both).
            await asyncio.gather(self._task, return_exceptions=True)

    async def _load(self, announce: bool = False) -> None:
        kvs, revision = await self.kv.range_prefix(self.prefix)
        fresh: dict[str, dict[str, tuple[int, bytes]]] = {}
        for kv in kvs:
            relative = kv.key[len(self.prefix):]
            fresh.setdefault(table_of(relative), {})[relative] = (kv.mod_revision, kv.value)
        held, self._tables = self._tables, fresh
        if announce:
            self._announce(held, fresh, revision)
        self._set_revision(revision)

    def _announce(self, held: dict[str, dict[str, tuple[int, bytes]]],
                  fresh: dict[str, dict[str, tuple[int, bytes]]], revision: int) -> None:
        """A reload after a compaction: the listeners are told what changed in the gap the
        watch could not replay (a deleted leader or member key among them), as the watch
        would have told them."""
        before = {key: entry for rows in held.values() for key, entry in rows.items()}
        after = {key: entry for rows in fresh.values() for key, entry in rows.items()}
        for key in sorted(before.keys() - after.keys()):
            self._tell(key, None, revision)
        for key, (mod_revision, value) in sorted(after.items()):
            if before.get(key) != (mod_revision, value):
                self._tell(key, value, mod_revision)

    async def _follow(self) -> None:
        while True:
            try:
                async for revision, events in self.kv.watch(self.prefix, self.revision + 1):
                    for event in events:
                        self._apply_event(event)
                    self._set_revision(max(revision if not events else events[-1].mod_revision, self.revision))
                return
            except Compacted as error:
                log.warning("the etcd watch fell behind a compaction (%s); reloading the copy", error)
                await self._reload()

    async def _reload(self) -> None:
        """Retried while etcd cannot answer: a copy whose task ended here would stay frozen
        for the process's life (a standby that never sees the leader key go, a GM's
        members and claims as they were)."""
        failures = 0
        while True:
            try:
                await self._load(announce=True)
                return
            except EtcdUnavailable as error:
                failures += 1
                log.warning("reloading the etcd copy failed (%s); retrying", error)
                await asyncio.sleep(min(1.0, 0.05 * failures))

    def _apply_event(self, event: WatchEvent) -> None:
        relative = event.key[len(self.prefix):]
        self.apply(relative, event.value, event.mod_revision)

    def apply(self, relative: str, value: bytes | None, revision: int) -> None:
        """One change, from the watch or from our own committed transaction; an older
        revision of a key than the one held is ignored (both paths may deliver it)."""
        table = self._tables.setdefault(table_of(relative), {})
        held = table.get(relative)
        if held is not None and held[0] > revision:
            return
        if value is None:
            table.pop(relative, None)
        else:
            table[relative] = (revision, value)
        self._tell(relative, value, revision)

    def _tell(self, relative: str, value: bytes | None, revision: int) -> None:
        for prefix, listener in self._listeners:
            if relative.startswith(prefix):
                listener(relative, value, revision)

    def _set_revision(self, revision: int) -> None:
        if revision > self.revision:
            self.revision = revision
            self._advanced.set()
            self._advanced = asyncio.Event()

    async def wait_for(self, revision: int, timeout_s: float) -> None:
        """Until the copy holds every change up to `revision`; TimeoutError after timeout_s."""
        async def wait() -> None:
            while self.revision < revision:
                await self._advanced.wait()
        await wait_for(wait(), timeout_s)
