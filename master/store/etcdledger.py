"""The usage ledger with the etcd store (README, "Usage ledger"): per-attempt rows stay out
of etcd; what etcd holds is one key per hour x user x queue with that hour's sums, put in
the transaction that commits the attempts' ends (so a sum counts an end exactly once, as
the end itself is committed once), under `ledger/hours/<hour>/<user>@<queue>`. The detail
goes to each master's local file (master/usage/ledgerdb.py) once etcd has the ends; a new
leader copies etcd's sums over its file's, so a report over a failover is right at the
hour level (the detail of the hours another master led lives in that master's file).

The keys are bounded: one per hour in which a user x queue pair had an attempt end, kept
for --ledger-retention (the leader deletes older hours, `expired`)."""

from __future__ import annotations

import json
from typing import Callable, Iterable
from urllib.parse import quote, unquote

from tcluster.domain.ledger import LedgerRow, Rollup, roll_up

HOURS = "ledger/hours"
Write = tuple[str, "bytes | None"]


def rollup_key(hour: int, user: str, queue: str) -> str:
    return f"{HOURS}/{hour}/{quote(user, safe='')}@{quote(queue, safe='')}"


def encode(r: Rollup) -> bytes:
    return json.dumps([r.cpu_seconds, r.gpu_seconds, r.wall_seconds, r.attempts, r.failures, r.jobs]).encode()


def decode(key: str, raw: bytes) -> Rollup:
    _, _, hour, pair = key.split("/", 3)
    user, _, queue = pair.partition("@")
    v = json.loads(raw)
    return Rollup(int(hour), unquote(user), unquote(queue), float(v[0]), float(v[1]), float(v[2]), int(v[3]),
                  int(v[4]), int(v[5]))


class RollupWrites:
    """The roll-up puts of a group commit's steps: each key's new total is what etcd holds
    (the leader's copy) plus the batch's earlier steps plus this one."""

    def __init__(self, read: Callable[[str], bytes | None]) -> None:
        self._read = read
        self._totals: dict[str, Rollup] = {}

    def of(self, rows: list[LedgerRow]) -> list[Write]:
        out: list[Write] = []
        for rollup in roll_up(rows).values():
            key = rollup_key(*rollup.key)
            current = self._totals.get(key)
            if current is None:
                raw = self._read(key)
                current = decode(key, raw) if raw is not None else None
            total = current.plus(rollup) if current is not None else rollup
            self._totals[key] = total
            out.append((key, encode(total)))
        return out


def held(tables: Iterable[str], items: Callable[[str], list[tuple[str, bytes]]]) -> list[Rollup]:
    """Every roll-up etcd holds (from the leader's copy)."""
    return [decode(key, raw) for table in tables for key, raw in items(table)]


def expired(tables: Iterable[str], items: Callable[[str], list[tuple[str, bytes]]], before: float) -> list[str]:
    """The keys of the hours that ended before `before` (past the retention)."""
    old = [t for t in tables if int(t.rpartition("/")[2]) + 3600 <= before]
    return [key for table in old for key, _ in items(table)]
