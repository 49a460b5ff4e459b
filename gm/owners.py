"""Who submitted each federated job, and the token its tasks are placed with (issue 35).

A table of its own beside the GM's jobs (same SQLite file, 0600 in a 0700 dir: the token is a
secret at rest, as the jobs' env is): the owner decides Get, Cancel and List, and the token
goes with every Place of the job's tasks, so each LM runs them as that user's mapping. Rows
go with their job's retention; a job of an insecure GM has none (no owner, no token)."""

from __future__ import annotations

import sqlite3

from tcluster.gm.store import JobRow

_SCHEMA = """
CREATE TABLE IF NOT EXISTS job_owners (job_id TEXT PRIMARY KEY, owner TEXT NOT NULL, token TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS job_owners_owner ON job_owners (owner);
"""


def token_of(db: sqlite3.Connection, job_id: str) -> str:
    """The token a job's tasks are placed with; "" for a job of an insecure GM."""
    try:
        row = db.execute("SELECT token FROM job_owners WHERE job_id=?", (job_id,)).fetchone()
    except sqlite3.OperationalError:     # no table yet: no job has an owner
        return ""
    return str(row[0]) if row else ""


class Owners:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.db.executescript(_SCHEMA)

    def put(self, job_id: str, owner: str, token: str) -> None:
        self.db.execute("INSERT OR IGNORE INTO job_owners (job_id, owner, token) VALUES (?, ?, ?)",
                        (job_id, owner, token))

    def owner(self, job_id: str) -> str:
        row = self.db.execute("SELECT owner FROM job_owners WHERE job_id=?", (job_id,)).fetchone()
        return str(row[0]) if row else ""

    def page(self, owner: str, queue: str, limit: int, before: int | None) -> tuple[list[JobRow], int | None]:
        """GMStore.page over one owner's jobs: newest first, and the row to continue before."""
        where, args = ["o.owner=?"], [owner]
        if queue:
            where.append("j.queue=?")
            args.append(queue)
        if before is not None:
            where.append("j.rowid<?")
            args.append(str(before))
        rows = self.db.execute(
            "SELECT j.rowid, j.id, j.queue, j.name, j.spec, j.tasks, j.submitted_at FROM jobs j "
            f"JOIN job_owners o ON o.job_id=j.id WHERE {' AND '.join(where)} ORDER BY j.rowid DESC LIMIT ?",
            (*args, limit + 1)).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        return [JobRow(*r[1:]) for r in rows], (rows[-1][0] if more and rows else None)
