"""Issue 35: a federated job's --retries (gm/retries.py): a FAILED or LOST run is placed
again while retries are left, with one more attempt; the count survives a GM restart; a
cancel, a success or a preemption uses none."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcluster.gm.retries import retried
from tcluster.gm.store import GMStore, TaskRow
from tcluster.v1 import jobs_pb2


class Port:
    def __init__(self, store: GMStore, retries: int) -> None:
        self._store = store
        self.spec = jobs_pb2.JobSpec(command=["false"], retries=retries)
        self.queued: list[TaskRow] = []

    @property
    def store(self) -> GMStore:
        return self._store

    def spec_of(self, job_id: str) -> jobs_pb2.JobSpec:
        return self.spec

    def enqueue(self, row: TaskRow) -> None:
        self.queued.append(row)


def job(tmp_path: Path, retries: int) -> tuple[Port, str]:
    store = GMStore(str(tmp_path / "gm"))
    job_id = store.add_job(0, "a", "n", b"", 2, "")
    store.placed(f"{job_id}.1", 0, 0, "lmjob1")
    return Port(store, retries), f"{job_id}.1"


def test_a_failed_run_is_retried_while_retries_are_left_then_the_failure_stands(tmp_path: Path) -> None:
    port, task = job(tmp_path, retries=2)
    never = lambda job_id: False    # noqa: E731
    assert retried(port, task, "FAILED", "exit code 3", never)
    row = port.store.tasks("task_id=?", (task,))[0]
    assert (row.state, row.attempt, row.lm_job, row.reason) == ("PENDING", 1, "", "retry 1 of 2 after: exit code 3")
    assert [r.task_id for r in port.queued] == [task]
    port.store.placed(task, 1, 0, "lmjob2")
    assert retried(port, task, "LOST", "node lost", never)
    port.store.close()
    port._store = GMStore(str(tmp_path / "gm"))          # a GM restart: the count is in the store
    port.store.placed(task, 0, 0, "lmjob3")
    assert not retried(port, task, "FAILED", "exit code 3", never)      # 2 of 2 used
    assert port.store.tasks("task_id=?", (task,))[0].attempt == 2


@pytest.mark.parametrize("state", ["SUCCEEDED", "CANCELLED"])
def test_a_success_or_a_cancel_is_never_retried(tmp_path: Path, state: str) -> None:
    port, task = job(tmp_path, retries=3)
    assert not retried(port, task, state, "", lambda job_id: False) and port.queued == []


def test_no_retry_without_retries_or_while_the_job_is_being_cancelled(tmp_path: Path) -> None:
    port, task = job(tmp_path, retries=0)
    assert not retried(port, task, "FAILED", "x", lambda job_id: False)
    port.spec.retries = 5
    assert not retried(port, task, "FAILED", "x", lambda job_id: job_id == task.rpartition(".")[0])
    assert port.queued == []
