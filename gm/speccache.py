"""The GM's spec cache drops a job's spec once the job has no unfinished task (issue 35: specs
were kept for the GM's life, 94 -> 193 MiB, also after cancel). Besides that the cache holds at
most SPEC_CACHE_JOBS jobs (gm/daemon.py); a dropped spec is read from the store again if a
task of that job is ever placed again."""

from __future__ import annotations

import sqlite3
from typing import Any, MutableMapping

from tcluster.gm.store import TERMINAL

SWEEP_EVERY_S = 2.0       # how often the cached jobs are checked (at most SPEC_CACHE_JOBS lookups)
_UNFINISHED = (f"SELECT 1 FROM tasks WHERE job_id=? AND state NOT IN ({','.join('?' * len(TERMINAL))}) LIMIT 1")


def drop_ended(specs: MutableMapping[str, Any], db: sqlite3.Connection) -> int:
    """Drops the specs of jobs with no unfinished task; returns how many. One indexed lookup per
    cached job (tasks_job), each stopping at the job's first unfinished task."""
    ended = [job_id for job_id in specs if db.execute(_UNFINISHED, (job_id, *TERMINAL)).fetchone() is None]
    for job_id in ended:
        del specs[job_id]
    return len(ended)
