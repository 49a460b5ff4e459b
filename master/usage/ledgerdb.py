"""The usage ledger in SQLite: one row per finished attempt (`ledger`) and its hourly sums
per user x queue (`ledger_hours`), which reports read for the whole hours of a period
(the detail rows serve the edges), so a report over millions of rows reads thousands.

With the SQLite store both tables live in the state database and a step's rows are
written in the transaction that commits the attempts' ends (`write_rows`): kept exactly
once, whatever dies when. With etcd, the hourly sums live in etcd (written with the ends,
master/store/etcdledger.py) and this file, local to each master (DATA_DIR/ledger.db),
keeps the detail and a copy of the sums (`LedgerFile.record`); a new leader copies etcd's
sums over its own (`LedgerFile.set_hours`)."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from tcluster.domain.errors import Unavailable

from tcluster.domain.ledger import (
    DAY_S, HOUR_S, LedgerRow, ReportLine, Rollup, Totals, day_of, report_line, roll_up, split_period,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger (
    job_id TEXT NOT NULL, idx INTEGER NOT NULL, attempt INTEGER NOT NULL, user TEXT NOT NULL, queue TEXT NOT NULL,
    node TEXT NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL, exit_code INTEGER, started_at REAL NOT NULL,
    ended_at REAL NOT NULL, cpu_s REAL NOT NULL, mem_peak INTEGER NOT NULL, gpu_s REAL NOT NULL,
    cpu_req REAL NOT NULL, job_end INTEGER NOT NULL, PRIMARY KEY (job_id, idx, attempt));
CREATE INDEX IF NOT EXISTS ledger_by_end ON ledger (ended_at);
CREATE INDEX IF NOT EXISTS ledger_by_user ON ledger (user, ended_at);
CREATE INDEX IF NOT EXISTS ledger_by_queue ON ledger (queue, ended_at);
CREATE TABLE IF NOT EXISTS ledger_hours (
    hour INTEGER NOT NULL, user TEXT NOT NULL, queue TEXT NOT NULL, cpu_s REAL NOT NULL, gpu_s REAL NOT NULL,
    wall_s REAL NOT NULL, attempts INTEGER NOT NULL, failures INTEGER NOT NULL, jobs INTEGER NOT NULL,
    PRIMARY KEY (hour, user, queue));
CREATE TABLE IF NOT EXISTS ledger_days (
    hour INTEGER NOT NULL, user TEXT NOT NULL, queue TEXT NOT NULL, cpu_s REAL NOT NULL, gpu_s REAL NOT NULL,
    wall_s REAL NOT NULL, attempts INTEGER NOT NULL, failures INTEGER NOT NULL, jobs INTEGER NOT NULL,
    PRIMARY KEY (hour, user, queue));
"""
# The sums, coarsest first: a report reads whole UTC days from ledger_days, whole hours from
# ledger_hours and the rest (at most an hour at each end) from the rows. `hour` is a
# bucket's start in both.
TIERS = ((DAY_S, "ledger_days"), (HOUR_S, "ledger_hours"))
_COLUMNS = ("job_id, idx, attempt, user, queue, node, state, reason, exit_code, started_at, ended_at, cpu_s, "
            "mem_peak, gpu_s, cpu_req, job_end")
_ADD = ("INSERT INTO {} VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (hour, user, queue) DO UPDATE SET "
             "cpu_s=cpu_s+excluded.cpu_s, gpu_s=gpu_s+excluded.gpu_s, wall_s=wall_s+excluded.wall_s, "
             "attempts=attempts+excluded.attempts, failures=failures+excluded.failures, jobs=jobs+excluded.jobs")
_INSERT = f"INSERT OR IGNORE INTO ledger ({_COLUMNS}) VALUES ({','.join('?' * 16)})"
BY_COLUMN = {"user": "user", "queue": "queue", "job": "job_id"}


def ensure_schema(db: sqlite3.Connection) -> None:
    for statement in filter(str.strip, SCHEMA.split(";")):
        db.execute(statement)


def _values(r: LedgerRow) -> tuple[object, ...]:
    return (r.job_id, r.index, r.attempt, r.user, r.queue, r.node, r.state, r.reason, r.exit_code, r.started_at,
            r.ended_at, r.cpu_seconds, r.memory_peak_bytes, r.gpu_seconds, r.cpu_request, int(r.job_end))


def row_of(v: tuple) -> LedgerRow:  # type: ignore[type-arg]
    return LedgerRow(job_id=v[0], index=v[1], attempt=v[2], user=v[3], queue=v[4], node=v[5], state=v[6],
                     reason=v[7], exit_code=v[8], started_at=v[9], ended_at=v[10], cpu_seconds=v[11],
                     memory_peak_bytes=v[12], gpu_seconds=v[13], cpu_request=v[14], job_end=bool(v[15]))


def _hour_values(r: Rollup) -> tuple[object, ...]:
    return (r.hour, r.user, r.queue, r.cpu_seconds, r.gpu_seconds, r.wall_seconds, r.attempts, r.failures, r.jobs)


def write_rows(db: sqlite3.Connection, rows: list[LedgerRow], hours: bool = True) -> list[LedgerRow]:
    """Inside the caller's transaction: the rows not yet kept (by task and attempt), and
    their sums added to the hours (unless `hours` is False: etcd's sums are copied instead).
    Returns the rows that were new: a repeat of a kept row changes nothing."""
    kept = _kept(db, rows)
    new: dict[tuple[str, int, int], LedgerRow] = {}
    for r in rows:
        key = (r.job_id, r.index, r.attempt)
        if key not in kept:
            new.setdefault(key, r)
    db.executemany(_INSERT, [_values(r) for r in new.values()])
    if hours and new:
        for unit, table in TIERS:
            db.executemany(_ADD.format(table), [_hour_values(r) for r in roll_up(new.values(), unit).values()])
    return list(new.values())


def _kept(db: sqlite3.Connection, rows: list[LedgerRow]) -> set[tuple[str, int, int]]:
    """Which of the rows' keys the table holds: one query per 300 keys."""
    found: set[tuple[str, int, int]] = set()
    for at in range(0, len(rows), 300):
        part = rows[at:at + 300]
        marks = ",".join(["(?,?,?)"] * len(part))
        args = [v for r in part for v in (r.job_id, r.index, r.attempt)]
        found.update(db.execute(f"SELECT job_id, idx, attempt FROM ledger WHERE (job_id, idx, attempt) IN "
                                f"(VALUES {marks})", args).fetchall())
    return found


PRUNE_BATCH = 2000      # rows per transaction: the state database's writer waits at most that long


def prune(db: sqlite3.Connection, before: float, batch: int = PRUNE_BATCH) -> int:
    """Forgets up to `batch` rows that ended before `before`, and the sums wholly before it."""
    gone = db.execute("DELETE FROM ledger WHERE rowid IN (SELECT rowid FROM ledger WHERE ended_at < ? LIMIT ?)",
                      (before, batch)).rowcount
    for unit, table in TIERS:
        db.execute(f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE hour <= ? LIMIT ?)",
                   (before - unit, batch))      # `hour <= x`, not `hour + unit <= before`: the index serves it
    return int(gone)


def _set_hours(db: sqlite3.Connection, hours: list[Rollup]) -> None:
    """etcd's sums of these hours replace the file's, unless the file's count more attempts
    (etcd's sums only grow: an older copy arriving late never undoes a newer one), and their
    days are summed again."""
    db.executemany("INSERT INTO ledger_hours VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (hour, user, queue) DO UPDATE SET "
                   "cpu_s=excluded.cpu_s, gpu_s=excluded.gpu_s, wall_s=excluded.wall_s, attempts=excluded.attempts, "
                   "failures=excluded.failures, jobs=excluded.jobs WHERE excluded.attempts >= ledger_hours.attempts",
                   [_hour_values(r) for r in hours])
    days = sorted({(day_of(r.hour), r.user, r.queue) for r in hours})
    db.executemany("INSERT OR REPLACE INTO ledger_days SELECT ?, user, queue, SUM(cpu_s), SUM(gpu_s), SUM(wall_s), "
                   "SUM(attempts), SUM(failures), SUM(jobs) FROM ledger_hours WHERE hour >= ? AND hour < ? "
                   "AND user = ? AND queue = ? GROUP BY user, queue",
                   [(day, day, day + DAY_S, user, queue) for day, user, queue in days])


class LedgerFile:
    """Reads (and, with etcd, writes) of the ledger tables in one SQLite file, from any
    thread (one at a time): reports run off the event loop."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._closed = False
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        with self._lock:
            ensure_schema(self._db)

    @contextmanager
    def _open(self) -> Iterator[sqlite3.Connection]:
        """The connection, one thread at a time, never after close(): sqlite3 used on a
        connection another thread is closing crashed the process (a prune in its worker
        thread while the master stopped)."""
        with self._lock:
            if self._closed:
                raise Unavailable("the usage ledger is closed: the master is stopping")
            yield self._db

    def close(self) -> None:
        """Waits for the statement in flight (a report, a prune's batch), then closes."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    def record(self, rows: list[LedgerRow], hours: Iterable[Rollup]) -> None:
        """etcd: the detail rows of ends etcd committed, and etcd's new sums of their hours."""
        with self._open(), self._db:
            self._db.execute("BEGIN")
            write_rows(self._db, rows, hours=False)
            _set_hours(self._db, list(hours))

    def set_hours(self, hours: Iterable[Rollup]) -> None:
        """A new leader: etcd's sums replace this file's (the hours it missed as a standby)."""
        self.record([], hours)

    def prune(self, before: float) -> int:
        """In short transactions (with SQLite the state database's committer shares the file's
        write lock), the lock let go between them (reports go on meanwhile)."""
        total = 0
        while True:
            try:
                with self._open(), self._db:
                    self._db.execute("BEGIN IMMEDIATE")
                    gone = prune(self._db, before)
                    left = self._db.execute("SELECT 1 FROM ledger_hours WHERE hour <= ? LIMIT 1",
                                            (before - HOUR_S,)).fetchone()
            except Unavailable:    # closed meanwhile (stopping): the rest waits for the next start
                return total
            total += gone
            if gone < PRUNE_BATCH and left is None:
                return total

    def hours(self) -> list[Rollup]:
        with self._open():
            rows = self._db.execute("SELECT * FROM ledger_hours").fetchall()
        return [Rollup(*r) for r in rows]

    def report(self, since: float, until: float, by: str, user: str = "") -> list[ReportLine]:
        """Sums per `by` (user, queue, job) of the attempts that ended in [since, until); only
        `user`'s when given. Whole days and hours come from the sums (not for `job`), the rest
        from the rows."""
        column = BY_COLUMN[by]
        totals: dict[str, Totals] = {}
        served, rest = split_period(since, until) if by != "job" else ([[] for _ in TIERS], [(since, until)])
        with self._open():
            for (_, table), spans in zip(TIERS, served):
                for first, last in spans:
                    self._add_sums(totals, table, column, first, last, user)
            self._add_rows(totals, column, rest, user)
        return [report_line(key, totals[key]) for key in sorted(totals)]

    def _add_sums(self, totals: dict[str, Totals], table: str, column: str, first: float, last: float,
                  user: str) -> None:
        where, args = "hour >= ? AND hour < ?", list[object]([first, last])
        if user:
            where, args = where + " AND user = ?", args + [user]
        for key, cpu, gpu, wall, attempts, failures, jobs in self._db.execute(
                f"SELECT {column}, SUM(cpu_s), SUM(gpu_s), SUM(wall_s), SUM(attempts), SUM(failures), SUM(jobs) "
                f"FROM {table} WHERE {where} GROUP BY {column}", args):
            _add(totals, key, cpu, gpu, wall, attempts, failures, jobs)

    def _add_rows(self, totals: dict[str, Totals], column: str, spans: list[tuple[float, float]], user: str) -> None:
        for since, until in spans:
            if until <= since:
                continue
            where, args = "ended_at >= ? AND ended_at < ?", list[object]([since, until])
            if user:
                where, args = "user = ? AND " + where, [user, *args]
            for key, cpu, gpu, wall, attempts, failures, jobs in self._db.execute(
                    f"SELECT {column}, SUM(cpu_s), SUM(gpu_s), SUM(MAX(0, ended_at - started_at)), COUNT(*), "
                    f"SUM(state IN ('FAILED', 'LOST')), SUM(job_end) FROM ledger WHERE {where} GROUP BY {column}",
                    args):
                _add(totals, key, cpu, gpu, wall, attempts, failures, jobs)

    def history(self, since: float, until: float, user: str = "", states: Iterable[str] = (),
                limit: int = 1000) -> list[LedgerRow]:
        """The attempts that ended in [since, until), newest first."""
        where, args = ["ended_at >= ?", "ended_at < ?"], list[object]([since, until])
        if user:
            where.append("user = ?")
            args.append(user)
        chosen = sorted(set(states))
        if chosen:
            where.append(f"state IN ({','.join('?' * len(chosen))})")
            args += chosen
        with self._open():
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM ledger WHERE {' AND '.join(where)} "
                                    "ORDER BY ended_at DESC, job_id, idx LIMIT ?", [*args, limit]).fetchall()
        return [row_of(r) for r in rows]


def _add(totals: dict[str, Totals], key: str, cpu: float, gpu: float, wall: float, attempts: int, failures: int,
         jobs: int) -> None:
    t = totals.setdefault(key, Totals())
    t.cpu_seconds += cpu or 0.0
    t.gpu_seconds += gpu or 0.0
    t.wall_seconds += wall or 0.0
    t.attempts += attempts or 0
    t.failures += failures or 0
    t.jobs += jobs or 0
