"""The etcd store's write plan, without etcd: which keys a step writes, in which order
(every prefix of them must load), and how a batch is cut into transactions."""

from __future__ import annotations

from tcluster.master.store.etcd import EtcdStore, merge_writes, step_writes, task_key
from tcluster.master.core.events import KillIntent, Step
from tcluster.model import Job, JobSpec, Task, TaskState
from tcluster.resources import Resources


def job(job_id: str, tasks: int = 1) -> Job:
    return Job(job_id, JobSpec(("true",), Resources(1), tasks=tasks), 1.0)


def submit_step(job_id: str, tasks: int) -> Step:
    return Step(jobs={job_id: job(job_id, tasks)},
                tasks={f"{job_id}.{i}": Task(job_id, i) for i in range(tasks)})


def store(max_ops: int) -> EtcdStore:
    plan = EtcdStore.__new__(EtcdStore)        # the planning half only: no etcd, no copy
    plan.max_txn_ops, plan.max_txn_bytes = max_ops, 1_000_000
    return plan


def test_a_new_jobs_spec_and_tasks_come_before_its_own_key() -> None:
    keys = [key for key, _ in step_writes(submit_step("j1", 3), {"j1"}, [])]
    assert keys == ["state/specs/j1", task_key("j1", 0), task_key("j1", 1), task_key("j1", 2), "state/jobs/j1"]


def test_a_deleted_job_goes_first_and_kills_follow_tasks() -> None:
    step = Step(jobs_del={"old"}, kills_put={("j1.0", 1): KillIntent("j1.0", 1, "n1", "cancel")},
                kills_del={("j1.0", 0)}, tasks={"j1.0": Task("j1", 0, TaskState.RUNNING, "n1", 1)})
    writes = step_writes(step, set(), ["purged"])
    assert writes[0] == ("state/jobs/old", None) and writes[1] == ("state/jobs/purged", None)
    keys = [key for key, _ in writes]
    assert keys.index(task_key("j1", 0)) < keys.index("state/kills/j1.0/0") < keys.index("state/kills/j1.0/1")


def test_a_batch_is_cut_at_the_op_limit_keeping_order() -> None:
    writes = step_writes(submit_step("big", 20), {"big"}, [])
    chunks = list(store(8)._chunks(writes))
    assert [len(c) for c in chunks] == [8, 8, 6]
    assert [key for chunk in chunks for key, _ in chunk] == [key for key, _ in writes]
    assert chunks[-1][-1][0] == "state/jobs/big"      # the job's key is in the last transaction


def test_a_key_written_twice_in_one_transaction_keeps_its_last_value() -> None:
    first = submit_step("j1", 1)
    running = Step(tasks={"j1.0": Task("j1", 0, TaskState.RUNNING, "n1", 1)})
    writes = step_writes(first, {"j1"}, []) + step_writes(running, set(), [])
    (chunk,) = list(store(128)._chunks(merge_writes(writes)))
    keys = [key for key, _ in chunk]
    assert len(keys) == len(set(keys)) == 3
    assert b"RUNNING" in dict(chunk)[task_key("j1", 0)]


def test_a_job_deleted_in_the_same_transaction_is_not_written_beside_its_deletion() -> None:
    writes = step_writes(submit_step("j1", 2), {"j1"}, []) + step_writes(Step(jobs_del={"j1"}), set(), [])
    (chunk,) = list(store(128)._chunks(merge_writes(writes)))
    assert chunk == [("state/jobs/j1", None)]
