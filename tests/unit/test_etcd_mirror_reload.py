"""The etcd copy after its watch fell behind a compaction: the reload is retried while
etcd is unreachable (the copy used to stop there for good), the listeners hear what
changed in the gap, and the watch goes on from the reloaded revision."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from tcluster.etcd.kv import Compacted, EtcdUnavailable, KeyValue, WatchEvent
from tcluster.etcd.mirror import Mirror

PREFIX = "/c/"


class CompactingKV:
    """range_prefix answers from `keys`, failing `unreachable` times after the first load;
    the first watch is compacted away, the next delivers `later` and then waits."""

    def __init__(self, keys: dict[str, tuple[int, bytes]], unreachable: int) -> None:
        self.keys, self.unreachable, self.revision = keys, unreachable, 10
        self.loads = 0
        self.watched_from: list[int] = []
        self.later: list[WatchEvent] = []

    async def range_prefix(self, prefix: str) -> tuple[list[KeyValue], int]:
        self.loads += 1
        if self.loads > 1 and self.unreachable:
            self.unreachable -= 1
            raise EtcdUnavailable("etcd did not answer a range (all members down)")
        return [KeyValue(PREFIX + k, v, rev, rev) for k, (rev, v) in sorted(self.keys.items())], self.revision

    async def watch(self, prefix: str, start_revision: int) -> AsyncIterator[tuple[int, list[WatchEvent]]]:
        self.watched_from.append(start_revision)
        if len(self.watched_from) == 1:
            raise Compacted(start_revision + 5)
        yield self.revision + 1, self.later
        await asyncio.Event().wait()


def test_the_reload_outlasts_an_unreachable_etcd_and_tells_the_listeners() -> None:
    async def main() -> None:
        kv = CompactingKV({"leader": (3, b"m1"), "auth/users/a": (4, b"x"), "auth/users/b": (5, b"y")}, unreachable=3)
        mirror = Mirror(kv, PREFIX)      # type: ignore[arg-type]
        heard: list[tuple[str, bytes | None]] = []
        mirror.listen("", lambda key, value, revision: heard.append((key, value)))
        kv.revision = 5
        await mirror.start()             # the first load; its watch is then compacted away
        # In the gap: the leader key went, b changed, c came; a stayed as it was.
        kv.keys = {"auth/users/a": (4, b"x"), "auth/users/b": (12, b"y2"), "auth/users/c": (13, b"z")}
        kv.revision = 20
        kv.later = [WatchEvent(PREFIX + "auth/users/d", b"w", 21)]
        for _ in range(400):
            if mirror.revision >= 21:
                break
            await asyncio.sleep(0.01)
        try:
            assert kv.loads == 1 + 3 + 1                 # three refused reloads, then one that answered
            assert kv.watched_from == [6, 21]            # resumed after the reloaded revision
            assert mirror.get("leader") is None and mirror.get("auth/users/b") == b"y2"
            assert mirror.items("auth/users") == [("auth/users/a", b"x"), ("auth/users/b", b"y2"),
                                                  ("auth/users/c", b"z"), ("auth/users/d", b"w")]
            assert heard == [("leader", None), ("auth/users/b", b"y2"), ("auth/users/c", b"z"),
                             ("auth/users/d", b"w")]
        finally:
            await mirror.stop()
    asyncio.run(main())
