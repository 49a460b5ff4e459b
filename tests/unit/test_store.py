from __future__ import annotations

from pathlib import Path

from tcluster.master.store import Store
from tcluster.model import Job, JobSpec, JobState, Node, NodeState, Task, TaskState, TaskUsage
from tcluster.resources import Resources


def test_round_trip_survives_reopen(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    spec = JobSpec(command=("python3", "-c", "print(42)"), resources=Resources(0.5, 256 * 2**20, (("net", 1e7),)),
                   name="n", queue="ads.prod", tasks=2, env=(("A", "1"),), labels=(("team", "x"),))
    job = Job("abc", spec, 10.0, JobState.RUNNING)
    task = Task("abc", 1, TaskState.SUCCEEDED, "n1", 2, 0, 0, "", 11.0, 12.0, TaskUsage(1.5, 0.5, 10, 20, 5, 5, 3, 12.0))
    node = Node("n1", Resources(4, 2**33), Resources(0.5, 2**28), (("rack", "r1"),), NodeState.DOWN, 9.0, "cgroup1")
    store = Store(db)
    store.write(jobs=[job], tasks=[Task("abc", 0), task], nodes=[node])
    store.close()
    again = Store(db)
    assert again.load_jobs() == [job]
    assert again.load_tasks() == [Task("abc", 0), task]
    assert again.load_nodes() == [node]
    again.close()


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    store = Store(tmp_path / "m.db")
    job = Job("abc", JobSpec(("x",), Resources(1)), 1.0)
    try:
        # The task references a job that is not written: the foreign key fails the whole batch.
        store.write(jobs=[job], tasks=[Task("missing", 0)])
    except Exception:
        pass
    assert store.load_jobs() == [] and store.load_tasks() == []
    store.close()
