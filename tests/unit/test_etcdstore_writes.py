"""The etcd store's write plan, without etcd: which keys a step writes, in which order
(every prefix of them must load), how a batch is cut into transactions (whole steps, or
the parts of one), and which writes etcd would refuse whatever they are packed with."""

from __future__ import annotations

import pytest

from tcluster.master.store.etcd import EtcdStore
from tcluster.master.store.etcdplan import merge_writes, step_writes
from tcluster.master.store.etcdrecords import task_key
from tcluster.master.store.etcdplan import ETCD_MAX_REQUEST_BYTES, chunks, oversized, plan_txns, touches
from tcluster.master.core.events import KillIntent, Step
from tcluster.domain.model import Job, JobSpec, Task, TaskState
from tcluster.domain.resources import Resources


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


# ---- packing a group commit: whole steps per transaction, a step's parts never shared ----

def writes_of(job_id: str, tasks: int) -> list:
    return step_writes(submit_step(job_id, tasks), {job_id}, [])


@pytest.mark.parametrize("sizes, max_ops, alone, expected", [
    ([1, 1, 1], 128, set(), [((0, 1, 2), True)]),                       # small steps share one transaction
    ([1, 1, 1], 7, set(), [((0, 1), True), ((2,), True)]),              # 3 keys each: cut between steps
    ([1, 20, 1], 8, set(), [((0,), True), ((1,), False), ((1,), False), ((1,), True), ((2,), True)]),
    ([1, 1, 1], 128, {1}, [((0,), True), ((1,), True), ((2,), True)]),  # retried alone: shares nothing
    ([1, 1, 1, 1], 128, {0}, [((0,), True), ((1, 2, 3), True)]),
])
def test_steps_are_packed_whole_and_a_large_one_is_split_alone(sizes: list[int], max_ops: int, alone: set[int],
                                                               expected: list) -> None:
    steps = [(n, writes_of(f"j{n}", tasks)) for n, tasks in enumerate(sizes)]
    txns = plan_txns(steps, max_ops, 1_000_000, frozenset(alone))
    assert [(t.steps, t.ends) for t in txns] == expected
    assert all(len(t.writes) <= max_ops for t in txns)
    # every step's keys are written, in its own order
    for n, writes in steps:
        mine = [w for t in txns if n in t.steps for w in t.writes if w[0].split("/")[2] == f"j{n}"]
        assert mine == writes


def test_a_transaction_is_cut_by_bytes_and_a_job_deletion_counts_its_three_ops() -> None:
    big = [("state/specs/a", b"x" * 600), ("state/jobs/a", b"[]")]
    assert [len(c) for c in chunks(big, 128, 500)] == [1, 1]
    deletions = [(f"state/jobs/d{n}", None) for n in range(5)]
    assert [len(c) for c in chunks(deletions, 8, 10_000)] == [2, 2, 1]


@pytest.mark.parametrize("writes, expected", [
    ([("state/specs/j1", b"{}"), (task_key("j1", 3), b"[]"), ("state/jobs/j1", b"[]")], {"job:j1"}),
    ([("state/kills/j2.4/1", None), ("state/nodes/n1", b"[]")], {"job:j2", "node:n1"}),
    ([("state/kills/a.b.c.0/2", b"[]")], {"job:a.b.c"}),
    ([], set()),
])
def test_the_rows_a_step_touches(writes: list, expected: set[str]) -> None:
    assert touches(writes) == expected


@pytest.mark.parametrize("value_bytes, limit, expected", [
    (1000, ETCD_MAX_REQUEST_BYTES, None),
    (1_500_000, ETCD_MAX_REQUEST_BYTES, None),                  # within 1.5 MiB less the margin
    (1_560_000, ETCD_MAX_REQUEST_BYTES, ("state/specs/j", 1_560_000 + len("state/specs/j") + 32)),
    (300_000, 200_000, ("state/specs/j", 300_000 + len("state/specs/j") + 32)),
])
def test_a_write_etcd_would_refuse_whatever_its_company(value_bytes: int, limit: int, expected: object) -> None:
    assert oversized([("state/jobs/j", b"[]"), ("state/specs/j", b"x" * value_bytes)], limit) == expected


def test_a_node_record_carries_its_operator_state_and_old_records_read_as_none() -> None:
    from tcluster.master.store.etcdrecords import node_record, read_node
    from tcluster.domain.model import Node, NodeState
    from tcluster.domain.nodeorders import NodeOps
    from tcluster.domain.resources import Resources
    node = Node("n1", Resources(4, 2**30), ops=NodeOps(NodeState.CORDONED, "alice", 3.0, "disk"))
    assert read_node("n1", node_record(node)) == node
    old = b'[{"cpu":4.0},{},{},"READY",5.0,"cgroup1"]'      # written before node operations
    assert read_node("n1", old).ops == NodeOps()


def test_a_task_record_keeps_its_gpu_binding_and_old_records_read_as_none() -> None:
    """An HA master restarted from etcd keeps the devices each attempt is bound to."""
    import json

    from tcluster.master.store.etcdrecords import read_task, task_record
    bound = Task("0123abcd", 0, TaskState.RUNNING, node="g1", attempt=2, gpus=(1, 3))
    assert read_task("0123abcd", 0, task_record(bound)) == bound
    older = json.dumps(json.loads(task_record(bound))[:11]).encode()      # a record written before GPUs: 11 fields
    assert read_task("0123abcd", 0, older).gpus == ()
