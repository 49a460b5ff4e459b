"""The GM's durable state: jobs as submitted and each task's progress, in SQLite.

Every write commits with synchronous=FULL (fsync) before the caller answers anyone:
a Submit is durable before it is acknowledged, and a Place request is recorded (with
its request id and exact bytes) before it is sent, so after a restart an unanswered
request is sent again unchanged and the LM answers it from memory (never twice)."""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from typing import Callable

# Test hook (issue 35, crash window): a GM process with this set exits at once after writing a
# job's rows and before writing its owner, inside their one transaction; a restart must then
# find no job (it never committed), not a job whose Places are refused for want of an owner.
CRASH_BEFORE_OWNER_ENV = "TCL_GM_TEST_CRASH_BEFORE_OWNER"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, queue TEXT NOT NULL, name TEXT NOT NULL,
    spec BLOB NOT NULL, tasks INTEGER NOT NULL, submitted_at REAL NOT NULL, request_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (task_id TEXT PRIMARY KEY, job_id TEXT NOT NULL, idx INTEGER NOT NULL,
    queue TEXT NOT NULL, state TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 0,
    lm INTEGER, node INTEGER, request BLOB, lm_job TEXT NOT NULL DEFAULT '',
    exit_code INTEGER NOT NULL DEFAULT 0, reason TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS tasks_job ON tasks (job_id);
CREATE TABLE IF NOT EXISTS cancels (job_id TEXT PRIMARY KEY, at REAL NOT NULL);
"""

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "LOST")


@dataclass(frozen=True)
class TaskRow:
    task_id: str
    job_id: str
    idx: int
    queue: str
    state: str          # PENDING, PLACING, RUNNING, or a terminal one
    attempt: int
    lm: int | None
    node: int | None
    request: bytes | None
    lm_job: str
    exit_code: int
    reason: str
    preemptions: int = 0


@dataclass(frozen=True)
class JobRow:
    id: str
    queue: str
    name: str
    spec: bytes
    tasks: int
    submitted_at: float


class GMStore:
    def __init__(self, state_dir: str) -> None:
        # 0700: the jobs it keeps hold their owners' environment (issue 35: it was world-readable).
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        os.chmod(state_dir, 0o700)
        path = os.path.join(state_dir, "gm.sqlite")
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))    # SQLite gives -wal and -shm its mode
        os.chmod(path, 0o600)         # 0600: it holds job env and the owners' tokens (gm/owners.py)
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(_SCHEMA)
        if "preemptions" not in {r[1] for r in self.db.execute("PRAGMA table_info(tasks)")}:
            # Added with Alg. 2 (issue 25): a state dir of an earlier GM gains it.
            self.db.execute("ALTER TABLE tasks ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0")
        if "failures" not in {r[1] for r in self.db.execute("PRAGMA table_info(tasks)")}:
            # Added with a federated job's --retries (issue 35): the failed runs retried so far.
            self.db.execute("ALTER TABLE tasks ADD COLUMN failures INTEGER NOT NULL DEFAULT 0")
        # Called after each end is written (the daemon lets a throttled array's next task in).
        self.on_ended: Callable[[str], None] | None = None

    def close(self) -> None:
        self.db.close()

    def job_of_request(self, request_id: str) -> str | None:
        row = self.db.execute("SELECT id FROM jobs WHERE request_id=?", (request_id,)).fetchone()
        return str(row[0]) if row else None

    def add_job(self, gm: int, queue: str, name: str, spec: bytes, tasks: int | list[int], request_id: str,
                also: Callable[[str], None] | None = None) -> str:
        """Allocate f<gm>-<n> and record the job and its PENDING tasks in one transaction;
        a repeated non-empty request id returns the first job instead. `tasks`: a count
        (indexes 0..N-1) or an array's indexes. `also(job_id)` writes in the same
        transaction (the owner record, gm/owners.py: a crash between two commits left a job
        no LM would run, for want of its owner's token)."""
        indexes = list(range(tasks)) if isinstance(tasks, int) else tasks
        if request_id:
            row = self.db.execute("SELECT id FROM jobs WHERE request_id=?", (request_id,)).fetchone()
            if row:
                return str(row[0])
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            row = self.db.execute("SELECT value FROM meta WHERE key='next_job'").fetchone()
            n = int(row[0]) if row else 1
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('next_job', ?)", (n + 1,))
            job_id = f"f{gm}-{n}"
            self.db.execute("INSERT INTO jobs VALUES (?,?,?,?,?,?,?)",
                            (job_id, queue, name, spec, len(indexes), time.time(), request_id))
            self.db.executemany("INSERT INTO tasks (task_id, job_id, idx, queue, state) VALUES (?,?,?,?, 'PENDING')",
                                [(f"{job_id}.{i}", job_id, i, queue) for i in indexes])
            if os.environ.get(CRASH_BEFORE_OWNER_ENV):
                os._exit(97)
            if also is not None:
                also(job_id)
        return job_id

    def placing(self, task_id: str, attempt: int, lm: int, node: int, request: bytes) -> None:
        self.db.execute("UPDATE tasks SET state='PLACING', attempt=?, lm=?, node=?, request=? WHERE task_id=?",
                        (attempt, lm, node, request, task_id))

    def placed(self, task_id: str, lm: int, node: int, lm_job: str) -> bool:
        """False when the task has ended already (its end came before this answer): the end
        is kept, and the LM job it ran as is filled in when the end did not carry it."""
        if self.db.execute("UPDATE tasks SET state='RUNNING', lm=?, node=?, lm_job=?, request=NULL "
                           "WHERE task_id=? AND state NOT IN ('SUCCEEDED','FAILED','CANCELLED','LOST')",
                           (lm, node, lm_job, task_id)).rowcount > 0:
            return True
        self.db.execute("UPDATE tasks SET lm_job=? WHERE task_id=? AND lm_job=''", (lm_job, task_id))
        return False

    def back_to_pending(self, task_id: str, attempt: int) -> None:
        self.db.execute("UPDATE tasks SET state='PENDING', attempt=?, request=NULL WHERE task_id=?",
                        (attempt, task_id))

    def preempted(self, task_id: str, attempt: int, reason: str) -> None:
        """Stopped by another queue's PreemptAndLaunch: waiting again (not an end), with why."""
        self.db.execute("UPDATE tasks SET state='PENDING', attempt=?, request=NULL, reason=?, "
                        "preemptions=preemptions+1 WHERE task_id=?", (attempt, reason[:1024], task_id))

    def ended_many(self, task_ids: list[str], state: str, reason: str) -> None:
        """Many tasks that never ran end at once, in one transaction (one fsync: a cancel of a
        10,000-task job stalled the GM's loop for 24 s, one commit per task)."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany("UPDATE tasks SET state=?, exit_code=0, reason=?, request=NULL WHERE task_id=?",
                                [(state, reason[:1024], t) for t in task_ids])

    def ended(self, task_id: str, state: str, exit_code: int, reason: str, lm_job: str = "") -> None:
        """lm_job: the LM job the end names; it fills the row's when the end came before the
        Place answer that would have named it (a job shows each task's LM job)."""
        self.db.execute("UPDATE tasks SET state=?, exit_code=?, reason=?, request=NULL, "
                        "lm_job=CASE WHEN lm_job='' THEN ? ELSE lm_job END WHERE task_id=?",
                        (state, exit_code, reason[:1024], lm_job, task_id))
        if self.on_ended is not None:
            self.on_ended(task_id)

    def failures(self, task_id: str) -> int:
        row = self.db.execute("SELECT failures FROM tasks WHERE task_id=?", (task_id,)).fetchone()
        return int(row[0]) if row else 0

    def retried(self, task_id: str, attempt: int, reason: str) -> None:
        """A failed run to be retried (the job's --retries): waiting again, one more failure."""
        self.db.execute("UPDATE tasks SET state='PENDING', attempt=?, request=NULL, reason=?, lm_job='', "
                        "failures=failures+1 WHERE task_id=?", (attempt, reason[:1024], task_id))

    def tasks(self, where: str = "1", args: tuple = ()) -> list[TaskRow]:
        rows = self.db.execute(
            "SELECT task_id, job_id, idx, queue, state, attempt, lm, node, request, lm_job, exit_code, reason, "
            "preemptions "
            f"FROM tasks WHERE {where} ORDER BY rowid", args).fetchall()
        return [TaskRow(*r) for r in rows]

    def job(self, job_id: str) -> JobRow | None:
        r = self.db.execute("SELECT id, queue, name, spec, tasks, submitted_at FROM jobs WHERE id=?",
                            (job_id,)).fetchone()
        return JobRow(*r) if r else None

    def cancel(self, job_id: str) -> None:
        """The intent to cancel a job, durable (kept until its last task ended)."""
        self.db.execute("INSERT OR IGNORE INTO cancels VALUES (?, ?)", (job_id, time.time()))

    def cancelling(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT job_id FROM cancels ORDER BY rowid")]

    def cancelled(self, job_id: str) -> None:
        """Every task of the job ended: the intent is done."""
        self.db.execute("DELETE FROM cancels WHERE job_id=?", (job_id,))

    def page(self, queue: str, limit: int, before: int | None) -> tuple[list[JobRow], int | None]:
        """Up to `limit` jobs newest first, those older than row `before` when given; and the
        row to continue before (None on the last page)."""
        where, args = ["1"], []
        if queue:
            where.append("queue=?")
            args.append(queue)
        if before is not None:
            where.append("rowid<?")
            args.append(before)
        rows = self.db.execute("SELECT rowid, id, queue, name, spec, tasks, submitted_at FROM jobs WHERE "
                               f"{' AND '.join(where)} ORDER BY rowid DESC LIMIT ?", (*args, limit + 1)).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        return [JobRow(*r[1:]) for r in rows], (rows[-1][0] if more and rows else None)

    def jobs(self, queue: str = "") -> list[JobRow]:
        q = "SELECT id, queue, name, spec, tasks, submitted_at FROM jobs"
        rows = self.db.execute(q + (" WHERE queue=? ORDER BY rowid" if queue else " ORDER BY rowid"),
                               (queue,) if queue else ()).fetchall()
        return [JobRow(*r) for r in rows]
