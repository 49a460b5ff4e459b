from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tcluster.master.core.events import KillIntent, KillMode, Step
from tcluster.master.store.sqlite import SCHEMA_VERSION, Store, StoreError
from tcluster.master.store.sqlrows import fresh_runs, insert_rows as _insert_rows
from tcluster.domain.model import Job, JobSpec, JobState, Node, NodeState, Task, TaskState, TaskUsage
from tcluster.domain.resources import Resources
from tcluster.domain.taskusage import NO_USAGE
from tests.unit.specs import job_specs


def _step(job: Job, tasks: list[Task], nodes: list[Node] = (), kills: list[KillIntent] = ()) -> Step:  # type: ignore[assignment]
    return Step(jobs={job.id: job}, tasks={t.id: t for t in tasks}, nodes={n.name: n for n in nodes},
                kills_put={(k.task_id, k.attempt): k for k in kills})


def test_round_trip_survives_reopen(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    spec = JobSpec(command=("python3", "-c", "print(42)"), resources=Resources(0.5, 256 * 2**20, (("net", 1e7),)),
                   name="n", queue="ads.prod", tasks=2, env=(("A", "1"),), labels=(("team", "x"),),
                   cpu_limit=0.5, pids_max=77, swap=-1, retries=2)
    job = Job("abc", spec, 10.0, JobState.RUNNING)
    task = Task("abc", 1, TaskState.SUCCEEDED, "n1", 2, 0, 0, "", 11.0, 12.0,
                TaskUsage(1.5, 0.5, 10, 20, 5, 5, 3, 12.0), failures=1, preemptions=2)
    node = Node("n1", Resources(4, 2**33), Resources(0.5, 2**28), (("rack", "r1"),), NodeState.DOWN, 9.0, "cgroup1")
    kill = KillIntent("abc.1", 2, "n1", "cancelled")
    preempt = KillIntent("abc.0", 1, "n1", "Preempted by job j2", KillMode.REQUEUE, by_job="j2")
    store = Store(db)
    store.apply(_step(job, [Task("abc", 0), task], [node], [kill, preempt]), new_jobs=["abc"])
    store.apply(Step(jobs={"abc": job.__class__(**{**job.__dict__, "cancelled": True})}))   # an update, no new spec
    store.close()
    again = Store(db)
    assert again.load_jobs()[0].spec == spec and again.load_jobs()[0].cancelled
    assert again.load_tasks() == [Task("abc", 0), task]
    # no usage: the one shared NO_USAGE, in memory and back from disk (usage_text's `is` shortcut)
    assert Task("abc", 0).usage is NO_USAGE and again.load_tasks()[0].usage is NO_USAGE
    assert again.load_nodes() == [node]
    assert sorted(again.load_kills(), key=lambda k: k.task_id) == [preempt, kill]
    again.apply(Step(kills_del={("abc.1", 2), ("abc.0", 1)}, jobs_del={"abc"}))
    assert again.load_jobs() == [] and again.load_tasks() == [] and again.load_kills() == []
    again.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=job_specs)
def test_every_spec_field_survives_the_store(tmp_path: Path, spec: JobSpec) -> None:
    db = tmp_path / "p.db"
    db.unlink(missing_ok=True)
    store = Store(db)
    store.apply(_step(Job("j1", spec, 1.0), []), new_jobs=["j1"])
    store.close()
    again = Store(db)
    assert again.load_jobs()[0].spec == spec
    again.close()


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    store = Store(tmp_path / "m.db")
    job = Job("abc", JobSpec(("x",), Resources(1)), 1.0)
    with pytest.raises(StoreError, match="cannot write its state"):
        # The task references a job that is not written: the foreign key fails the whole batch.
        store.apply(Step(jobs={job.id: job}, tasks={"missing.0": Task("missing", 0)}), new_jobs=["abc"])
    assert store.load_jobs() == [] and store.load_tasks() == []
    store.apply(_step(job, [Task("abc", 0)]), new_jobs=["abc"])     # it reopens and goes on
    assert [j.id for j in store.load_jobs()] == ["abc"]
    store.close()


def test_a_version_1_database_is_migrated_and_keeps_node_limits(tmp_path: Path) -> None:
    """The v1 loader dropped cpu_limit, swap and pids_max; the codec reads every field."""
    db = tmp_path / "old.db"
    raw = sqlite3.connect(db)
    raw.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema_version', '1');
        CREATE TABLE jobs (id TEXT PRIMARY KEY, spec TEXT NOT NULL, state TEXT NOT NULL, submitted_at REAL NOT NULL,
            finished_at REAL NOT NULL, pending_reason TEXT NOT NULL, cancelled INTEGER NOT NULL);
        CREATE TABLE tasks (job_id TEXT NOT NULL REFERENCES jobs(id), idx INTEGER NOT NULL, state TEXT NOT NULL,
            node TEXT NOT NULL, attempt INTEGER NOT NULL, exit_code INTEGER, signal INTEGER NOT NULL,
            reason TEXT NOT NULL, started_at REAL NOT NULL, finished_at REAL NOT NULL, usage TEXT NOT NULL,
            PRIMARY KEY (job_id, idx));
        CREATE TABLE nodes (name TEXT PRIMARY KEY, capacity TEXT NOT NULL, reserved TEXT NOT NULL,
            labels TEXT NOT NULL, state TEXT NOT NULL, last_seen REAL NOT NULL, runtime TEXT NOT NULL);
    """)
    spec = {"command": ["true"], "resources": {"cpu": 1.0, "memory": 1024.0}, "name": "", "queue": "default",
            "tasks": 1, "env": [], "user": "", "workdir": "", "labels": [], "constraints": [], "weight": 1.0,
            "cpu_limit": 0.5, "swap": 0, "pids_max": 77}
    raw.execute("INSERT INTO jobs VALUES ('j', ?, 'PENDING', 1.0, 0.0, '', 0)", (json.dumps(spec),))
    raw.execute("INSERT INTO tasks VALUES ('j', 0, 'PENDING', '', 0, NULL, 0, '', 0, 0, ?)",
                (json.dumps(TaskUsage().__dict__),))
    raw.commit()
    raw.close()
    store = Store(db)
    loaded = store.load_jobs()[0].spec
    assert (loaded.cpu_limit, loaded.pids_max) == (0.5, 77)
    assert store.load_tasks()[0].failures == 0 and store.load_kills() == []
    store.close()


def test_a_version_3_database_gains_node_operations_and_keeps_its_nodes(tmp_path: Path) -> None:
    """v4 -> v5 adds nodes.ops (from v3, after v4's step; idempotently); a node's
    operator state (who, when, why, deadline, window) is written and read back."""
    from tcluster.domain.nodeorders import NodeOps
    db = tmp_path / "v3.db"
    raw = sqlite3.connect(db)
    raw.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema_version', '3');
        CREATE TABLE nodes (name TEXT PRIMARY KEY, capacity TEXT NOT NULL, reserved TEXT NOT NULL,
            labels TEXT NOT NULL, state TEXT NOT NULL, last_seen REAL NOT NULL, runtime TEXT NOT NULL);
        INSERT INTO nodes VALUES ('n1', '{"cpu": 4.0}', '{}', '{}', 'READY', 5.0, 'cgroup1');
    """)
    raw.commit()
    raw.close()
    store = Store(db)
    assert [(n.name, n.ops) for n in store.load_nodes()] == [("n1", NodeOps())]
    draining = NodeOps(NodeState.DRAINING, "alice", 7.0, "kernel 6.8", deadline=3607.0, since=7.0,
                       maint_start=9000.0, maint_end=9600.0, maint_by="ops", maint_reason="ups")
    node = store.load_nodes()[0]
    store.apply(Step(nodes={"n1": Node(node.name, node.capacity, node.reserved, node.labels, node.state,
                                       node.last_seen, node.runtime, ops=draining)}))
    store.close()
    again = Store(db)
    assert again.load_nodes()[0].ops == draining
    again.close()
    assert sqlite3.connect(db).execute("SELECT value FROM meta").fetchone() == (str(SCHEMA_VERSION),)


def test_a_version_5_database_gains_the_tasks_gpu_binding(tmp_path: Path) -> None:
    """v5 -> v6 adds tasks.gpus: an old row reads as no GPUs; a binding is written and read back."""
    db = tmp_path / "v5.db"
    store = Store(db)
    job = Job("0123abcd", JobSpec(("x",), Resources.of({"cpu": 1, "gpu": 2})), 1.0)
    store.apply(Step(jobs={job.id: job}, tasks={"0123abcd.0": Task(job.id, 0)}), new_jobs=[job.id])
    store.close()
    raw = sqlite3.connect(db)
    raw.executescript("ALTER TABLE tasks DROP COLUMN gpus; UPDATE meta SET value = '5' WHERE key = 'schema_version';")
    raw.commit()
    raw.close()
    store = Store(db)
    assert store.load_tasks()[0].gpus == ()
    store.apply(Step(tasks={"0123abcd.0": Task(job.id, 0, TaskState.RUNNING, node="n1", attempt=1, gpus=(0, 2))}))
    store.close()
    again = Store(db)
    assert again.load_tasks()[0].gpus == (0, 2)
    again.close()


def test_a_new_jobs_fresh_tasks_are_written_as_runs_with_the_rows_of_one_by_one(tmp_path: Path) -> None:
    """A submit's fresh tasks go in as runs made inside SQLite: the same rows, column for
    column, as the row-by-row INSERT writes; a task of the new job that is not fresh, and
    the gaps between runs, stay as they are."""
    job = Job("j", JobSpec(("true",), Resources(1), tasks=6), 1.0)
    odd = Task("j", 3, TaskState.RUNNING, "n1", 1, started_at=2.5, usage=TaskUsage(1.5, 0.5, 10, 20, 5, 5, 3, 12.0))
    tasks = [Task("j", 0), Task("j", 1), Task("j", 2), odd, Task("j", 5)]
    runs, rest = fresh_runs(tasks, {"j"})
    assert runs == [("j", 0, 2), ("j", 5, 5)] and rest == [odd]
    rows = {}
    for name in ("runs", "rows"):
        store = Store(tmp_path / f"{name}.db")
        if name == "runs":
            store.apply(_step(job, tasks), new_jobs=["j"])
        else:     # the job first; then its tasks, as a later step's, row by row
            store.apply(Step(jobs={"j": job}), new_jobs=["j"])
            store.apply(_step(job, tasks))
        rows[name] = sqlite3.connect(tmp_path / f"{name}.db").execute(
            "SELECT *, typeof(started_at), typeof(exit_code) FROM tasks ORDER BY job_id, idx").fetchall()
        assert Store(tmp_path / f"{name}.db").load_tasks() == tasks
        store.close()
    assert rows["runs"] == rows["rows"] and len(rows["runs"]) == 5


@pytest.mark.parametrize("count", [0, 1, 63, 64, 65, 200])
def test_rows_go_in_many_to_a_statement_all_of_them_in_order(count: int) -> None:
    """Every row is written, whatever the count against the rows per statement; a later
    row replaces an earlier one of the same key, as one statement later would."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT, x REAL)")
    rows = [(i % max(count - 3, 1), f"v{i}", i / 3) for i in range(count)]
    _insert_rows(db, "INSERT OR REPLACE INTO t", "(?,?,?)", rows)
    assert db.execute("SELECT k, v, x FROM t ORDER BY k").fetchall() == sorted({r[0]: r for r in rows}.values())


def _dump(path: Path) -> dict[str, list[tuple]]:  # type: ignore[type-arg]
    db = sqlite3.connect(path)
    return {t: db.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in ("jobs", "tasks", "nodes", "kills")}


def test_a_batch_written_at_once_leaves_the_rows_of_its_steps_written_one_by_one(tmp_path: Path) -> None:
    """A group commit merges consecutive steps (each row as the last step left it) and
    writes a step that deletes jobs in its place: the tables end as step-by-step writes
    leave them."""
    a = Job("a", JobSpec(("true",), Resources(1), tasks=3), 1.0)
    b = Job("b", JobSpec(("true",), Resources(1), tasks=2), 2.0)
    node = Node("n1", Resources(4, 2**33), Resources(0.5, 2**28), (("rack", "r1"),), NodeState.READY, 9.0, "cgroup1")
    kill = KillIntent("a.1", 1, "n1", "cancelled")
    running = JobState.RUNNING
    steps = [
        (_step(a, [Task("a", i) for i in range(3)]), ["a"]),
        (Step(jobs={"a": Job("a", a.spec, 1.0, running)}, nodes={"n1": node},
              tasks={f"a.{i}": Task("a", i, TaskState.STARTING, "n1", 1) for i in range(3)}), []),
        (_step(b, [Task("b", 0), Task("b", 1)]), ["b"]),
        (Step(tasks={"a.1": Task("a", 1, TaskState.RUNNING, "n1", 1, started_at=3.0)},
              kills_put={("a.1", 1): kill}), []),
        (Step(kills_del={("a.1", 1)}, kills_put={("a.0", 1): KillIntent("a.0", 1, "n1", "x")}), []),
        (Step(jobs_del={"b"}), []),
        (_step(Job("b", b.spec, 5.0), [Task("b", 0)]), ["b"]),     # the same id again, after its delete
        (Step(kills_put={("a.1", 1): kill}, tasks={"b.0": Task("b", 0, TaskState.STARTING, "n1", 1)}), []),
    ]
    at_once, one_by_one = Store(tmp_path / "once.db"), Store(tmp_path / "each.db")
    at_once.apply_many(steps)
    for step, new_jobs in steps:
        one_by_one.apply(step, new_jobs)
    at_once.close()
    one_by_one.close()
    assert _dump(tmp_path / "once.db") == _dump(tmp_path / "each.db")
    assert len(_dump(tmp_path / "once.db")["kills"]) == 2
