"""The usage history on disk: its own SQLite file beside the master's state, written in
batches (each series every `history_flush_s`, spread over that period, and all at stop),
never once per heartbeat. The loop only copies the new buckets; a worker thread writes.

Each flush appends, per changed series and tier, the buckets since the last flush as one
blob (bfloat16 rows), and drops chunks that fell out of the tier's window. A finished
task is written once more and then leaves memory; it is read back from here on request
until its job is forgotten. History is not state: `synchronous=NORMAL`, and a write error
is logged, never fatal (the rings stay in memory and the next flush tries again)."""

from __future__ import annotations

import json
import logging
import sqlite3
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tcluster.master.store.sqlrows import insert_rows
from tcluster.master.usage.history import (
    CLUSTER, GPU, NODE, QUEUE, TASK, HistoryConfig, Schema, Series, TaskRecord, settle,
)
from tcluster.master.usage.recorder import Recorder
from tcluster.master.usage.ringflush import RingChunks, mark_dirty, mark_flushed, unflushed_chunks
from tcluster.master.usage.taskrings import TaskRings

log = logging.getLogger(__name__)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (key TEXT NOT NULL, tier INTEGER NOT NULL, first INTEGER NOT NULL,
    last INTEGER NOT NULL, rows BLOB NOT NULL, PRIMARY KEY (key, tier, first));
CREATE TABLE IF NOT EXISTS tasks (id TEXT PRIMARY KEY, job_id TEXT NOT NULL, info TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS oom_kills (node TEXT NOT NULL, queue TEXT NOT NULL, kills INTEGER NOT NULL,
    PRIMARY KEY (node, queue));
"""


@dataclass
class Batch:
    chunks: list[tuple[str, int, int, int, bytes]] = field(default_factory=list)
    prune: list[tuple[str, int, int]] = field(default_factory=list)
    tasks: list[tuple[str, str, str]] = field(default_factory=list)
    counters: list[tuple[str, str, int]] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)
    marks: list[tuple[Any, int]] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    # The task slots written from the shared rings (master/usage/ringflush.py): their marks,
    # and the slots and owners to mark dirty again if the write fails.
    ring_chunks: list[RingChunks] = field(default_factory=list)
    ring_slots: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    ring_owners: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def _task_info(rec: TaskRecord) -> str:
    return json.dumps({"job_id": rec.job_id, "node": rec.node, "queue": rec.queue, "attempt": rec.attempt,
                       "prev": rec.prev, "oom_seen": rec.oom_seen, "ooms": rec.ooms, "peak": rec.peak,
                       "ended": rec.ended})


_PRUNE_ROWS = 64     # (key, tier, last) triples per statement: under 999 parameters


def _prune(db: sqlite3.Connection, prune: list[tuple[str, int, int]]) -> None:
    """Drops each (key, tier)'s chunks that end at or before its `last`: 64 series to a
    statement (the same rows as one DELETE each)."""
    for at in range(0, len(prune), _PRUNE_ROWS):
        part = prune[at:at + _PRUNE_ROWS]
        values = ",".join(["(?,?,?)"] * len(part))
        db.execute(f"WITH p(k, t, l) AS (VALUES {values}) DELETE FROM chunks WHERE rowid IN "
                   "(SELECT c.rowid FROM p JOIN chunks c ON c.key = p.k AND c.tier = p.t AND c.last <= p.l)",
                   [v for row in part for v in row])


class HistoryStore:
    def __init__(self, path: Path | str, config: HistoryConfig) -> None:
        self.config = config
        self._path = str(path)
        self._db: sqlite3.Connection | None = None
        self._parts = 0                       # collect's partition: each series' part, by key
        self._part_of: dict[str, int] = {}
        self._open()

    def _open(self) -> sqlite3.Connection | None:
        """The history is a convenience: a disk that refuses it (read-only, full) leaves the
        master running, with history in memory only until the file can be opened."""
        if self._db is None:
            try:
                db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.executescript(_SCHEMA)
                self._db = db
            except sqlite3.Error as error:
                log.error("usage history file %s cannot be opened (%s): kept in memory only for now",
                          self._path, error)
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()

    # ---- writing: collect on the loop (cheap copies), write in a thread, finish on the loop ----

    def _chooser(self, part: int, parts: int) -> Callable[[str], bool]:
        """Whether a series (a task by its id, others by their key) is in `part`: the crc32
        of its key, computed once per series (a part never changes while `parts` does not)."""
        if parts <= 1:
            return lambda _key: True
        if parts != self._parts:
            self._part_of.clear()
            self._parts = parts
        part_of = self._part_of

        def mine(key: str) -> bool:
            found = part_of.get(key)
            if found is None:
                found = part_of[key] = zlib.crc32(key.encode()) % parts
            return found == part
        return mine

    def collect(self, rec: Recorder, part: int = 0, parts: int = 1) -> Batch:
        """What changed among the series in `part` of `parts` (by key), so that a periodic
        flush spreads over its period instead of stalling the loop once. A series' part is
        looked up (cached) before its dirty flag is read: with 20,000 running tasks, reading
        every flag each second held the loop ~130 ms a tick (issue 38's profile)."""
        mine = self._chooser(part, parts)
        batch = Batch()
        chosen = [(f"task:{tid}", r.series, r) for tid, r in rec.tasks.items()
                  if mine(tid) and (r.series.dirty or (r.gpu is not None and r.gpu.dirty))]
        chosen += [(f"node:{n}", s, None) for n, s in rec.nodes.items() if mine(f"node:{n}") and s.dirty]
        chosen += [(f"queue:{q}", s, None) for q, s in rec.queues.items() if mine(f"queue:{q}") and s.dirty]
        chosen += [("cluster", rec.cluster, None)] if mine("cluster") and rec.cluster.dirty else []
        if len(self._part_of) > 2 * (len(rec.tasks) + len(rec.nodes) + len(rec.queues)) + 1024:
            self._part_of.clear()      # forgotten tasks' entries: rebuilt on the next ticks
        for _, series, task in chosen:        # one bfloat16 conversion for all open buckets
            plain = [series] if task is None or task.slot < 0 else []
            if task is not None and task.gpu is not None:
                plain.append(task.gpu)
            for one in plain:
                for tier in one.tiers:
                    tier.stage_open()
        settle()
        ringed = [(key, task) for key, _, task in chosen if task is not None and task.slot >= 0]
        rec.rings.settle([task.slot for _, task in ringed])
        self._ring_chunks(batch, rec.rings, ringed)
        for key, series, task in chosen:
            if task is None or task.slot < 0:
                self._chunks(batch, key, series)
            if task is not None and task.gpu is not None:     # a task's GPU series goes with it
                self._chunks(batch, f"gpu:{key[5:]}", task.gpu)
            if task is not None:
                batch.tasks.append((key[5:], task.job_id, _task_info(rec.sync(task))))
                if task.ended:
                    batch.ended.append(key[5:])
        batch.counters = [(n, q, k) for (n, q), k in rec.oom_kills.items()]
        batch.forgotten, rec.forgotten = sorted(rec.forgotten), set()
        return batch

    @staticmethod
    def _ring_chunks(batch: Batch, rings: TaskRings, ringed: list[tuple[str, TaskRecord]]) -> None:
        """The task series in the shared rings: every slot's chunks at once (ringflush)."""
        slots = np.fromiter((task.slot for _, task in ringed), dtype=np.int64, count=len(ringed))
        batch.ring_slots, batch.ring_owners = slots, rings.owners[slots].copy()
        rings.dirty[slots] = False
        batch.ring_chunks = unflushed_chunks(rings, slots)
        for chunk in batch.ring_chunks:
            size = rings.tiers[chunk.tier].size
            for i, first, last, rows in zip(chunk.index.tolist(), chunk.first.tolist(), chunk.last.tolist(),
                                            chunk.rows):
                key = ringed[i][0]
                batch.chunks.append((key, chunk.tier, first, last, rows))
                batch.prune.append((key, chunk.tier, last - size))

    @staticmethod
    def _chunks(batch: Batch, key: str, series: Series) -> None:
        series.dirty = False
        batch.series.append(series)
        for number, tier in enumerate(series.tiers):
            pending = tier.unflushed(settled=True)
            if pending is not None:
                first, rows = pending
                last = first + len(rows) - 1
                batch.chunks.append((key, number, first, last, rows.tobytes()))
                batch.prune.append((key, number, tier.last - tier.size))
                batch.marks.append((tier, last))

    def write(self, batch: Batch) -> bool:
        """One transaction; safe to run in a worker thread (one write at a time)."""
        db = self._open()
        if db is None:
            return False
        try:
            with db:
                db.execute("BEGIN")
                # Many rows to a statement: each statement step lets go of the GIL and takes it
                # back, waiting up to 5 ms on a busy loop (master/store/sqlrows.py, the convoy).
                insert_rows(db, "INSERT OR REPLACE INTO chunks", "(?,?,?,?,?)", batch.chunks)
                _prune(db, batch.prune)
                insert_rows(db, "INSERT OR REPLACE INTO tasks", "(?,?,?)", batch.tasks)
                db.executemany("INSERT OR REPLACE INTO oom_kills VALUES (?,?,?)", batch.counters)
                for job_id in batch.forgotten:
                    for kind in ("task", "gpu"):
                        db.execute("DELETE FROM chunks WHERE key >= ? AND key < ?",
                                   (f"{kind}:{job_id}.", f"{kind}:{job_id}/"))
                    db.execute("DELETE FROM tasks WHERE job_id=?", (job_id,))
            return True
        except sqlite3.Error as error:
            log.error("usage history not written (kept in memory, retried at the next flush): %s", error)
            return False

    @staticmethod
    def finish(rec: Recorder, batch: Batch, ok: bool) -> None:
        if not ok:
            for series in batch.series:
                series.dirty = True
            mark_dirty(rec.rings, batch.ring_slots, batch.ring_owners)
            rec.forgotten.update(batch.forgotten)
            return
        for tier, last in batch.marks:
            tier.flushed = max(tier.flushed, last)
        mark_flushed(rec.rings, batch.ring_chunks)
        for task_id in batch.ended:       # on disk now; read back on request
            record = rec.tasks.get(task_id)
            if (record is not None and record.ended and not record.series.dirty
                    and not (record.gpu is not None and record.gpu.dirty)):
                rec.release(task_id)

    def flush(self, rec: Recorder) -> int:
        """Everything that changed, synchronously (at stop, and in tests); returns the series written."""
        batch = self.collect(rec)
        ok = self.write(batch)
        self.finish(rec, batch, ok)
        return len(batch.series) + len(batch.ring_slots) if ok else 0

    # ---- reading ----

    def load_series(self, key: str, schema: Schema) -> Series | None:
        if self._db is None:
            return None
        rows = self._db.execute("SELECT tier, first, rows FROM chunks WHERE key=? ORDER BY tier, first",
                                (key,)).fetchall()
        if not rows:
            return None
        series = Series(schema, self.config)
        width = len(schema.fields)
        for tier, first, blob in rows:
            if tier < len(series.tiers):
                series.tiers[tier].put_rows(first, np.frombuffer(blob, dtype=np.uint16).reshape(-1, width))
        return series

    def load_task(self, task_id: str) -> TaskRecord | None:
        if self._db is None:
            return None
        row = self._db.execute("SELECT info FROM tasks WHERE id=?", (task_id,)).fetchone()
        if row is None:
            return None
        # A task killed before its first sample has no chunks, but its record (its OOM event,
        # its peak) is still what the job page shows.
        series, gpu = self.load_series(f"task:{task_id}", TASK), self.load_series(f"gpu:{task_id}", GPU)
        info = json.loads(row[0])
        return TaskRecord(info["job_id"], info["node"], info["queue"], info["attempt"],
                          series or Series(TASK, self.config),     # GPU samples before any usage sample
                          tuple(info["prev"]) if info["prev"] else None, info["oom_seen"],
                          [tuple(o) for o in info["ooms"]], info["peak"], info["ended"], gpu=gpu)

    def restore(self, rec: Recorder, running: set[str]) -> None:
        """After a restart: counters, node/queue/cluster series and the running tasks'."""
        if self._db is None:
            return
        for node, queue, kills in self._db.execute("SELECT node, queue, kills FROM oom_kills"):
            rec.oom_kills[(node, queue)] = kills
        others = "SELECT DISTINCT key FROM chunks WHERE key NOT LIKE 'task:%' AND key NOT LIKE 'gpu:%'"
        for (key,) in self._db.execute(others).fetchall():
            kind, _, name = key.partition(":")
            if kind == "node":
                rec.nodes[name] = self.load_series(key, NODE)
            elif kind == "queue":
                rec.queues[name] = self.load_series(key, QUEUE)
            elif kind == "cluster":
                rec.cluster = self.load_series(key, CLUSTER) or rec.cluster
        for task_id in running:
            task = self.load_task(task_id)
            if task is not None:
                task.ended = False
                rec.add_record(task_id, task)
