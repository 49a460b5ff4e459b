"""How the SQLite store's rows go in: many to a statement, and a group commit's steps
as one where that writes the same rows.

The sqlite3 module lets go of the GIL around every statement step and must take it back
after: with the event loop busy, each take waits up to the switch interval (5 ms), so a
group commit of thousands of rows, one statement step each, took seconds (the convoy),
holding back every launch and reply waiting on it. Fewer statements: a run of a new job's
fresh tasks is made inside SQLite, other rows go 64 to a statement, and consecutive steps
of a batch are merged, each row keeping the last value the steps gave it."""

from __future__ import annotations

import sqlite3
from functools import lru_cache
from itertools import chain
from typing import Iterable

from tcluster.master.core.events import KillIntent, Step
from tcluster.domain.model import Task, TaskState, TaskUsage
from tcluster.wire.codec import usage_to_json
from tcluster.domain.taskusage import NO_USAGE


def usage_text(usage: TaskUsage) -> str:
    # `is` first: most rows share NO_USAGE; building a TaskUsage per row to compare with
    # cost as much as the rest of the row.
    return "" if usage is NO_USAGE or usage == NO_USAGE else usage_to_json(usage)


# A task as a submit makes it (Task(job_id, index)'s defaults, past job_id and index).
_FRESH = (TaskState.PENDING, "", 0, None, 0, "", 0.0, 0.0, 0, 0, ())
# The rows of a run of fresh tasks, made inside SQLite: one statement per run instead of a
# bound row each (the same rows as the general INSERT would write).
FRESH_RUN = ("WITH RECURSIVE run(n) AS (SELECT ? UNION ALL SELECT n + 1 FROM run WHERE n < ?) "
             "INSERT OR REPLACE INTO tasks SELECT ?, n, 'PENDING', '', 0, NULL, 0, '', 0.0, 0.0, '', 0, 0, '' FROM run")


# Rows per INSERT statement at most: under 999 parameters, the limit of SQLite builds
# before 3.32.
_ROWS_PER_STATEMENT = 64


@lru_cache(maxsize=64)
def _values_sql(head: str, row: str, count: int) -> str:
    return f"{head} VALUES {','.join([row] * count)}"


def insert_rows(db: sqlite3.Connection, head: str, row: str, rows: list[tuple]) -> None:  # type: ignore[type-arg]
    """`head` VALUES `row`,... for every row, in order (a later row replaces an earlier one
    as it would one statement later): runs of 64 rows, then 32, 16, ... for the rest, so
    that a few statement texts serve every count."""
    size, at = _ROWS_PER_STATEMENT, 0
    while at < len(rows):
        while size > len(rows) - at:
            size //= 2
        db.execute(_values_sql(head, row, size), list(chain.from_iterable(rows[at:at + size])))
        at += size


def _is_fresh(t: Task) -> bool:
    return (t.state, t.node, t.attempt, t.exit_code, t.signal, t.reason, t.started_at, t.finished_at,
            t.failures, t.preemptions, t.gpus) == _FRESH and usage_text(t.usage) == ""


def fresh_runs(tasks: Iterable[Task], new_jobs: set[str]) -> tuple[list[tuple[str, int, int]], list[Task]]:
    """A step's task rows split into runs (job, first, last index) of a new job's fresh
    tasks, and the rest, which are written row by row."""
    runs: list[tuple[str, int, int]] = []
    rest: list[Task] = []
    for t in tasks:
        if t.job_id not in new_jobs or not _is_fresh(t):
            rest.append(t)
        elif runs and runs[-1][0] == t.job_id and runs[-1][2] == t.index - 1:
            runs[-1] = (t.job_id, runs[-1][1], t.index)
        else:
            runs.append((t.job_id, t.index, t.index))
    return runs, rest


def coalesce(steps: list[tuple[Step, list[str]]]) -> list[tuple[Step, set[str]]]:
    """The batch's steps, consecutive ones merged into one that writes the same rows: each
    job, task, node and kill intent as the last step left it (a job new in any of them is
    inserted with its last values). A step that deletes jobs or purges old ones is written
    on its own, in its place, as are the steps around it."""
    out: list[tuple[Step, set[str]]] = []
    merged: Step | None = None
    kills: dict[tuple[str, int], KillIntent | None] = {}
    new: set[str] = set()
    for step, new_jobs in steps:
        if step.jobs_del or step.purge_before:
            if merged is not None:
                out.append((_with_kills(merged, kills), new))
                merged, kills, new = None, {}, set()
            out.append((step, set(new_jobs)))
            continue
        if merged is None:
            merged = Step()
        merged.jobs.update(step.jobs)
        merged.tasks.update(step.tasks)
        merged.nodes.update(step.nodes)
        if step.decayed_usage is not None:     # one record: the last ledger wins
            merged.decayed_usage = step.decayed_usage
        merged.ledger.extend(step.ledger)
        merged.specs.update(step.specs)
        kills.update(dict.fromkeys(sorted(step.kills_del)))
        kills.update(step.kills_put)
        new.update(new_jobs)
    if merged is not None:
        out.append((_with_kills(merged, kills), new))
    return out


def _with_kills(step: Step, kills: dict[tuple[str, int], KillIntent | None]) -> Step:
    step.kills_put = {key: k for key, k in kills.items() if k is not None}
    step.kills_del = {key for key, k in kills.items() if k is None}
    return step
