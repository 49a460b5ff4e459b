"""The master's durable state: jobs, tasks, nodes and kill intents in SQLite (WAL mode).

A step's rows are written in one transaction with `synchronous=FULL` before the master
acts on them or replies, so an acknowledged submit survives a SIGKILL and a power loss.
A failed write raises StoreError and changes nothing in memory (the caller applies a
step only after it is written); the next write reopens the database, so the master
resumes by itself once the disk is back. A job's spec is written once, when it is
submitted; later writes touch only its mutable columns."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
from pathlib import Path
from typing import Iterable

from tcluster.wire.codec import (
    job_extra_to_json, resources_from_dict, spec_from_json, spec_to_json, usage_from_json, with_job_extra,
)
from tcluster.domain.errors import Unavailable
from tcluster.master.core.events import KillIntent, Step, kill_mode
from tcluster.domain.model import Job, JobState, Node, NodeState, Task, TaskState, gpus_from_text, gpus_to_text
from tcluster.domain.taskusage import NO_USAGE
from tcluster.domain.nodeorders import ops_from_json, ops_to_json
from tcluster.domain.resources import Resources
from tcluster.master.store.sqlrows import FRESH_RUN, coalesce, fresh_runs, insert_rows, usage_text
from tcluster.scheduler.decay import encode
from tcluster.master.usage import ledgerdb

log = logging.getLogger(__name__)
SCHEMA_VERSION = 6
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, spec TEXT NOT NULL, state TEXT NOT NULL, submitted_at REAL NOT NULL,
    finished_at REAL NOT NULL, pending_reason TEXT NOT NULL, cancelled INTEGER NOT NULL,
    extra TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS tasks (
    job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, idx INTEGER NOT NULL, state TEXT NOT NULL,
    node TEXT NOT NULL, attempt INTEGER NOT NULL, exit_code INTEGER, signal INTEGER NOT NULL,
    reason TEXT NOT NULL, started_at REAL NOT NULL, finished_at REAL NOT NULL, usage TEXT NOT NULL,
    failures INTEGER NOT NULL DEFAULT 0, preemptions INTEGER NOT NULL DEFAULT 0, gpus TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, idx));
CREATE TABLE IF NOT EXISTS nodes (
    name TEXT PRIMARY KEY, capacity TEXT NOT NULL, reserved TEXT NOT NULL, labels TEXT NOT NULL,
    state TEXT NOT NULL, last_seen REAL NOT NULL, runtime TEXT NOT NULL, ops TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS jobs_by_submit ON jobs (submitted_at, id);
CREATE INDEX IF NOT EXISTS jobs_by_finish ON jobs (finished_at);
CREATE TABLE IF NOT EXISTS kills (
    task_id TEXT NOT NULL, attempt INTEGER NOT NULL, node TEXT NOT NULL, reason TEXT NOT NULL,
    retry INTEGER NOT NULL, by_job TEXT NOT NULL DEFAULT '', PRIMARY KEY (task_id, attempt));
"""
# Columns added since: (table, column, declaration), by the version that lacks them. A
# table the schema creates afresh (kills, before v2) already has them: added only if missing.
_MIGRATIONS = {
    # v1 -> v2: retries count failures; kill intents become rows.
    1: [("tasks", "failures", "INTEGER NOT NULL DEFAULT 0")],
    # v2 -> v3: preemption. A kill's `retry` holds its KillMode (0 end, 1 retry, 2 requeue).
    2: [("tasks", "preemptions", "INTEGER NOT NULL DEFAULT 0"), ("kills", "by_job", "TEXT NOT NULL DEFAULT ''")],
    # v3 -> v4: batch work: an array's ranges, its throttle, a dependency's release (codec.job_extra_to_json).
    3: [("jobs", "extra", "TEXT NOT NULL DEFAULT ''")],
    # v4 -> v5: node operations. A node's operator state (cordon, drain, window) as JSON; '' = none.
    4: [("nodes", "ops", "TEXT NOT NULL DEFAULT ''")],
    # v5 -> v6: the GPU indices bound to a task's attempt ("0,2"; '' for none).
    5: [("tasks", "gpus", "TEXT NOT NULL DEFAULT ''")],
}


class StoreError(Unavailable):
    """The state could not be written; nothing changed."""


def _on_read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _resources_json(r: Resources) -> str:
    return json.dumps(r.as_dict())


def _job(r: tuple) -> Job:  # type: ignore[type-arg]
    return with_job_extra(Job(id=r[0], spec=spec_from_json(r[1]), state=JobState(r[2]), submitted_at=r[3],
                              finished_at=r[4], cancelled=bool(r[5])), r[6])


def _task(r: tuple) -> Task:  # type: ignore[type-arg]
    return Task(job_id=r[0], index=r[1], state=TaskState(r[2]), node=r[3], attempt=r[4], exit_code=r[5],
                signal=r[6], reason=r[7], started_at=r[8], finished_at=r[9],
                usage=usage_from_json(r[10]) if r[10] else NO_USAGE, failures=r[11], preemptions=r[12],
                gpus=gpus_from_text(r[13]))


class Store:
    """One connection, used from the master's event loop thread only."""

    def __init__(self, path: Path | str) -> None:
        self._path = str(path)
        self._broken = False
        self._read_only = False
        self._reader: sqlite3.Connection | None = None
        try:
            self._db = self._open()
            self._migrate()
        except sqlite3.OperationalError as error:
            if not _on_read_only_fs(Path(path).parent):
                raise
            # Serve what is on disk; every write fails (and retries the open) until the
            # filesystem is writable again.
            log.error("the state directory is read-only (%s): serving reads, refusing writes", error)
            self._read_only = self._broken = True

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")   # an acknowledged write survives power loss
        db.execute("PRAGMA foreign_keys=ON")
        return db

    def _migrate(self) -> None:
        row = None
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.OperationalError:
            pass                                  # a new database
        version = int(row[0]) if row else SCHEMA_VERSION
        if version > SCHEMA_VERSION:
            raise RuntimeError(f"state database schema {version} is newer than {SCHEMA_VERSION}; upgrade tcl-master")
        with self._db:
            self._db.execute("BEGIN")
            for statement in filter(str.strip, _SCHEMA.split(";")):
                self._db.execute(statement)
            ledgerdb.ensure_schema(self._db)     # the usage ledger: new tables, no migration
            for step in range(version, SCHEMA_VERSION):
                for table, column, declaration in _MIGRATIONS[step]:
                    have = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
                    if column not in have:
                        self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    def close(self) -> None:
        if not self._read_only:
            self._db.close()
        if self._reader is not None:
            self._reader.close()

    # ---- writes ----

    def apply(self, step: Step, new_jobs: Iterable[str] = ()) -> None:
        """Writes a step's rows in one transaction; StoreError if the disk refuses."""
        self.apply_many([(step, list(new_jobs))])

    async def commit(self, steps: list[tuple[Step, list[str]]]) -> list[Exception | None]:
        """StateStore: the rows go to disk on a worker thread, off the event loop, in one
        transaction: all of them are durable, or (StoreError) none. A record SQLite could
        hold but etcd could not is refused at submit (tcluster/domain/bounds.py), so both stores
        take the same jobs."""
        await asyncio.to_thread(self.apply_many, steps)
        return [None] * len(steps)

    def apply_many(self, steps: list[tuple[Step, list[str]]]) -> None:
        """Writes several steps' rows, in order, in one transaction (group commit). Called
        from the committer's worker thread: this connection is used by one thread at a time."""
        steps = [(step, new) for step, new in steps if step.durable]
        if not steps:
            return
        try:
            if self._broken:
                if not self._read_only:
                    self._db.close()
                self._db = self._open()
                if self._read_only:
                    self._migrate()
                    self._read_only = False
                    self._reset_reader()
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                for step, new_jobs in coalesce(steps):
                    self._write(step, new_jobs)
            self._broken = False
        except sqlite3.Error as error:
            self._broken = True
            log.error("state write failed: %s", error)
            raise StoreError(f"the master cannot write its state ({error}); it refuses new work until "
                             "its disk is writable again, and keeps serving reads") from error

    def _write(self, step: Step, new_jobs: set[str]) -> None:
        db = self._db
        insert_rows(db, "INSERT INTO jobs", "(?,?,?,?,?,'',?,?)", [
            (j.id, spec_to_json(j.spec), j.state.value, j.submitted_at, j.finished_at, int(j.cancelled),
             job_extra_to_json(j))
            for j in step.jobs.values() if j.id in new_jobs])
        db.executemany("UPDATE jobs SET state=?, finished_at=?, cancelled=?, extra=? WHERE id=?", [
            (j.state.value, j.finished_at, int(j.cancelled), job_extra_to_json(j), j.id)
            for j in step.jobs.values() if j.id not in new_jobs])
        db.executemany("UPDATE jobs SET spec=? WHERE id=?", [   # `tcl update` of a pending job
            (spec_to_json(step.jobs[j].spec), j) for j in sorted(step.specs) if j in step.jobs and j not in new_jobs])
        runs, rest = fresh_runs(step.tasks.values(), new_jobs) if new_jobs else ([], step.tasks.values())
        for job_id, first, last in runs:
            db.execute(FRESH_RUN, (first, last, job_id))
        insert_rows(db, "INSERT OR REPLACE INTO tasks", "(?,?,?,?,?,?,?,?,?,?,?,?,?,?)", [
            (t.job_id, t.index, t.state.value, t.node, t.attempt, t.exit_code, t.signal, t.reason,
             t.started_at, t.finished_at, usage_text(t.usage), t.failures, t.preemptions,
             gpus_to_text(t.gpus))
            for t in rest])
        insert_rows(db, "INSERT OR REPLACE INTO nodes", "(?,?,?,?,?,?,?,?)", [
            (n.name, _resources_json(n.capacity), _resources_json(n.reserved), json.dumps(dict(n.labels)),
             n.state.value, n.last_seen, n.runtime, ops_to_json(n.ops)) for n in step.nodes.values()])
        db.executemany("DELETE FROM kills WHERE task_id=? AND attempt=?", sorted(step.kills_del))
        insert_rows(db, "INSERT OR REPLACE INTO kills", "(?,?,?,?,?,?)", [
            (k.task_id, k.attempt, k.node, k.reason, int(k.mode), k.by_job) for k in step.kills_put.values()])
        if step.ledger:     # with the ends above: kept exactly once (README, "Usage ledger")
            ledgerdb.write_rows(db, step.ledger)
        db.executemany("DELETE FROM tasks WHERE job_id=?", [(j,) for j in sorted(step.jobs_del)])
        db.executemany("DELETE FROM jobs WHERE id=?", [(j,) for j in sorted(step.jobs_del)])
        if step.decayed_usage is not None:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('decayed_usage', ?)", (encode(step.decayed_usage).decode(),))
        if step.purge_before:
            old = "SELECT id FROM jobs WHERE finished_at > 0 AND finished_at < ?"
            db.execute(f"DELETE FROM tasks WHERE job_id IN ({old})", (step.purge_before,))
            db.execute("DELETE FROM jobs WHERE finished_at > 0 AND finished_at < ?", (step.purge_before,))

    # ---- reads (at start, and from the event loop on their own connection) ----

    def _reads(self) -> sqlite3.Connection:
        """The loop thread's connection: the committer's thread writes on the other one. On
        a read-only filesystem, an immutable view (WAL's shared memory cannot be made there)."""
        if self._reader is None:
            if self._read_only:
                self._reader = sqlite3.connect(f"file:{self._path}?mode=ro&immutable=1", uri=True,
                                               isolation_level=None, check_same_thread=False)
            else:
                self._reader = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        return self._reader

    def _reset_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def job_exists(self, job_id: str) -> bool:
        try:
            return self._reads().execute("SELECT 1 FROM jobs WHERE id=?", (job_id,)).fetchone() is not None
        except sqlite3.Error:
            return False

    _JOB_COLUMNS = "id, spec, state, submitted_at, finished_at, cancelled, extra"
    _TASK_COLUMNS = ("job_id, idx, state, node, attempt, exit_code, signal, reason, started_at, finished_at, usage, "
                     "failures, preemptions, gpus")

    def load_jobs(self, finished_limit: int | None = None, finished_tasks: int | None = None) -> list[Job]:
        """Every unfinished job, and the `finished_limit` most recently finished (all if None),
        as long as their tasks stay within `finished_tasks`."""
        db = self._reads()
        if finished_limit is None:
            rows = db.execute(f"SELECT {self._JOB_COLUMNS} FROM jobs ORDER BY submitted_at, id").fetchall()
        else:
            rows = db.execute(f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE finished_at = 0").fetchall()
            recent = db.execute(f"SELECT {self._JOB_COLUMNS}, json_extract(spec, '$.tasks') FROM jobs "
                                "WHERE finished_at > 0 ORDER BY finished_at DESC LIMIT ?", (finished_limit,)).fetchall()
            budget = finished_tasks if finished_tasks is not None else float("inf")
            for row in recent:
                budget -= row[-1] or 1
                if budget < 0:
                    break
                rows.append(row[:-1])
            rows.sort(key=lambda r: (r[3], r[0]))
        return [_job(r) for r in rows]

    def load_tasks(self, job_ids: set[str] | None = None) -> list[Task]:
        db = self._reads()
        if job_ids is None:
            rows = db.execute(f"SELECT {self._TASK_COLUMNS} FROM tasks ORDER BY job_id, idx").fetchall()
            return [_task(r) for r in rows]
        ids, out = sorted(job_ids), []
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            out += [_task(r) for r in db.execute(
                f"SELECT {self._TASK_COLUMNS} FROM tasks WHERE job_id IN ({marks}) ORDER BY job_id, idx", chunk)]
        return out

    def load_job(self, job_id: str) -> tuple[Job, list[Task]] | None:
        """A job that is no longer in memory (finished long enough ago)."""
        db = self._reads()
        row = db.execute(f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            return None
        rows = db.execute(f"SELECT {self._TASK_COLUMNS} FROM tasks WHERE job_id=? ORDER BY idx", (job_id,)).fetchall()
        return _job(row), [_task(r) for r in rows]

    def load_job_record(self, job_id: str) -> Job | None:
        row = self._reads().execute(f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE id=?", (job_id,)).fetchone()
        return _job(row) if row is not None else None

    def job_keys(self, states: list[str], queue: str, before: tuple[float, str] | None,
                 limit: int, owner: str = "") -> tuple[list[tuple[float, str]], int]:
        """(submitted_at, id) newest first, strictly before `before`; and how many match in all."""
        where, args = ["1=1"], []
        if states:
            where.append(f"state IN ({','.join('?' * len(states))})")
            args += states
        if queue:
            where.append("json_extract(spec, '$.queue') = ?")
            args.append(queue)
        if owner:    # older records have no owner: they match no owner filter
            where.append("json_extract(spec, '$.owner') = ?")
            args.append(owner)
        total = self._reads().execute(f"SELECT COUNT(*) FROM jobs WHERE {' AND '.join(where)}", args).fetchone()[0]
        if before is not None:
            where.append("(submitted_at < ? OR (submitted_at = ? AND id < ?))")
            args += [before[0], before[0], before[1]]
        rows = self._reads().execute(f"SELECT submitted_at, id FROM jobs WHERE {' AND '.join(where)} "
                                     "ORDER BY submitted_at DESC, id DESC LIMIT ?", [*args, limit]).fetchall()
        return [(r[0], r[1]) for r in rows], total

    def load_nodes(self) -> list[Node]:
        rows = self._reads().execute("SELECT name, capacity, reserved, labels, state, last_seen, runtime, ops "
                                     "FROM nodes ORDER BY name").fetchall()
        return [Node(name=r[0], capacity=resources_from_dict(json.loads(r[1])),
                     reserved=resources_from_dict(json.loads(r[2])), labels=tuple(sorted(json.loads(r[3]).items())),
                     state=NodeState(r[4]), last_seen=r[5], runtime=r[6], ops=ops_from_json(r[7])) for r in rows]

    def load_decayed_usage(self) -> bytes | None:
        row = self._reads().execute("SELECT value FROM meta WHERE key='decayed_usage'").fetchone()
        return row[0].encode() if row else None

    def load_kills(self) -> list[KillIntent]:
        rows = self._reads().execute("SELECT task_id, attempt, node, reason, retry, by_job FROM kills").fetchall()
        return [KillIntent(r[0], r[1], r[2], r[3], kill_mode(r[4]), r[5]) for r in rows]
