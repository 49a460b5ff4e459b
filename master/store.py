"""The master's durable state: jobs, tasks and nodes in SQLite (WAL mode).

Every state change is written before the master acts on it, so a restart resumes from
exactly what was decided. Values go in and out as domain dataclasses."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict
from pathlib import Path
from typing import Iterable

from tcluster.model import Job, JobSpec, JobState, Node, NodeState, Task, TaskState, TaskUsage
from tcluster.resources import Resources

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, spec TEXT NOT NULL, state TEXT NOT NULL, submitted_at REAL NOT NULL,
    finished_at REAL NOT NULL, pending_reason TEXT NOT NULL, cancelled INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    job_id TEXT NOT NULL REFERENCES jobs(id), idx INTEGER NOT NULL, state TEXT NOT NULL,
    node TEXT NOT NULL, attempt INTEGER NOT NULL, exit_code INTEGER, signal INTEGER NOT NULL,
    reason TEXT NOT NULL, started_at REAL NOT NULL, finished_at REAL NOT NULL, usage TEXT NOT NULL,
    PRIMARY KEY (job_id, idx));
CREATE TABLE IF NOT EXISTS nodes (
    name TEXT PRIMARY KEY, capacity TEXT NOT NULL, reserved TEXT NOT NULL, labels TEXT NOT NULL,
    state TEXT NOT NULL, last_seen REAL NOT NULL, runtime TEXT NOT NULL);
"""


def _resources_json(r: Resources) -> str:
    return json.dumps(r.as_dict())


def _resources_load(text: str) -> Resources:
    return Resources.of(json.loads(text))


def _spec_json(spec: JobSpec) -> str:
    data = asdict(spec)
    data["resources"] = spec.resources.as_dict()
    return json.dumps(data)


def _spec_load(text: str) -> JobSpec:
    data = json.loads(text)
    return JobSpec(
        command=tuple(data["command"]), resources=Resources.of(data["resources"]),
        name=data["name"], queue=data["queue"], tasks=data["tasks"],
        env=tuple(tuple(p) for p in data["env"]), user=data["user"], workdir=data["workdir"],
        labels=tuple(tuple(p) for p in data["labels"]), constraints=tuple(data.get("constraints", ())),
        weight=float(data.get("weight", 1.0)),
    )


class Store:
    """One connection, used from the master's event loop thread only."""

    def __init__(self, path: Path | str) -> None:
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes in WAL
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)
        self._check_version()

    def _check_version(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) != SCHEMA_VERSION:
            raise RuntimeError(f"state database schema {row[0]} is not {SCHEMA_VERSION}; this master cannot read it")

    def close(self) -> None:
        self._db.close()

    def write(self, jobs: Iterable[Job] = (), tasks: Iterable[Task] = (), nodes: Iterable[Node] = ()) -> None:
        """Writes all of it in one transaction: either everything lands or nothing."""
        with self._db:  # BEGIN ... COMMIT / ROLLBACK
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO jobs VALUES (?,?,?,?,?,?,?)",
                [(j.id, _spec_json(j.spec), j.state.value, j.submitted_at, j.finished_at,
                  j.pending_reason, int(j.cancelled)) for j in jobs],
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO tasks VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [(t.job_id, t.index, t.state.value, t.node, t.attempt, t.exit_code, t.signal, t.reason,
                  t.started_at, t.finished_at, json.dumps(asdict(t.usage))) for t in tasks],
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO nodes VALUES (?,?,?,?,?,?,?)",
                [(n.name, _resources_json(n.capacity), _resources_json(n.reserved), json.dumps(dict(n.labels)),
                  n.state.value, n.last_seen, n.runtime) for n in nodes],
            )

    def load_jobs(self) -> list[Job]:
        rows = self._db.execute("SELECT * FROM jobs ORDER BY submitted_at, id").fetchall()
        return [
            Job(id=r[0], spec=_spec_load(r[1]), state=JobState(r[2]), submitted_at=r[3], finished_at=r[4],
                pending_reason=r[5], cancelled=bool(r[6]))
            for r in rows
        ]

    def load_tasks(self) -> list[Task]:
        rows = self._db.execute("SELECT * FROM tasks ORDER BY job_id, idx").fetchall()
        return [
            Task(job_id=r[0], index=r[1], state=TaskState(r[2]), node=r[3], attempt=r[4], exit_code=r[5],
                 signal=r[6], reason=r[7], started_at=r[8], finished_at=r[9], usage=TaskUsage(**json.loads(r[10])))
            for r in rows
        ]

    def load_nodes(self) -> list[Node]:
        rows = self._db.execute("SELECT * FROM nodes ORDER BY name").fetchall()
        return [
            Node(name=r[0], capacity=_resources_load(r[1]), reserved=_resources_load(r[2]),
                 labels=tuple(sorted(json.loads(r[3]).items())), state=NodeState(r[4]), last_seen=r[5], runtime=r[6])
            for r in rows
        ]
