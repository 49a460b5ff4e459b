"""The etcd store answers for each step of a group commit, without etcd: a transaction
etcd refuses is retried step by step so that only the step at fault fails; a step that
changes the rows of a refused one is not written; after a write whose outcome etcd did
not report, the steps it held may have been applied and those after it were not."""

from __future__ import annotations

import asyncio

import pytest

from tcluster.domain.errors import InvalidArgument, Unavailable
from tcluster.master.core.events import Step
from tcluster.master.store.base import StoreRefused
from tcluster.master.store.etcd import EtcdStore, Write
from tcluster.etcd.kv import EtcdRefused
from tcluster.master.store.sqlite import StoreError
from tcluster.domain.model import Job, JobSpec, Task, TaskState
from tcluster.domain.resources import Resources

BIG = "x" * 400          # etcd here refuses any transaction with a value this large (its "request too large")


def submit(job_id: str, env: str = "") -> tuple[Step, list[str]]:
    job = Job(job_id, JobSpec(("true",), Resources(1), env=(("E", env),) if env else ()), 1.0)
    return Step(jobs={job_id: job}, tasks={f"{job_id}.0": Task(job_id, 0)}), [job_id]


def place(job_id: str) -> tuple[Step, list[str]]:
    return Step(tasks={f"{job_id}.0": Task(job_id, 0, TaskState.RUNNING, "n1", 1)}), []


class FakeEtcd:
    """Records each transaction's keys; refuses one with a large value; loses the answer
    to the one that writes `unknown_key`."""

    def __init__(self, unknown_key: str = "") -> None:
        self.written: list[list[str]] = []
        self.unknown_key = unknown_key

    async def write(self, chunk: list[Write]) -> None:
        if any(len(value or b"") > len(BIG) for _, value in chunk):
            raise EtcdRefused("etcd refused the transaction: etcdserver: request is too large")
        if any(key == self.unknown_key for key, _ in chunk):
            self.written.append([key for key, _ in chunk])      # the worst case: it was applied
            raise StoreError("the master cannot write its state: no quorum. The change may still be applied")
        self.written.append([key for key, _ in chunk])


def store(etcd: FakeEtcd, max_ops: int = 128, max_request_bytes: int = 30_000) -> EtcdStore:
    plan = EtcdStore.__new__(EtcdStore)        # the planning half only, over the fake's transactions
    plan.max_txn_ops, plan.max_txn_bytes, plan.max_request_bytes = max_ops, 1_000_000, max_request_bytes
    plan._index = {}
    plan._write = etcd.write                   # type: ignore[method-assign]
    return plan


def outcome(error: Exception | None) -> str:
    if error is None:
        return "ok"
    if isinstance(error, StoreRefused):
        assert isinstance(error, InvalidArgument)        # INVALID_ARGUMENT: sending it again will not help
        return "refused"
    assert isinstance(error, Unavailable)
    return "unknown" if "may still be applied" in str(error) else "not written"


@pytest.mark.parametrize("steps, etcd, max_ops, expected", [
    ([submit("a"), submit("b"), submit("c")], FakeEtcd(), 128, ["ok", "ok", "ok"]),
    # one user's oversized step fails alone; the batch around it is written
    ([submit("a"), submit("b", BIG + "!"), submit("c"), submit("d")], FakeEtcd(), 128, ["ok", "refused", "ok", "ok"]),
    # what depends on a refused step (the same job's rows) is not written; the rest is
    ([submit("a"), submit("b", BIG + "!"), place("b"), place("a")], FakeEtcd(), 128,
     ["ok", "refused", "not written", "ok"]),
    # one step per transaction; the third's outcome is unknown: honest about it and after it
    ([submit("a"), submit("b"), submit("c"), submit("d")], FakeEtcd("state/jobs/c"), 3,
     ["ok", "ok", "unknown", "not written"]),
    # the same within one shared transaction: every step in it may have been applied
    ([submit("a"), submit("b"), submit("c")], FakeEtcd("state/jobs/c"), 128, ["unknown", "unknown", "unknown"]),
    # larger than etcd takes at all: refused before anything is sent
    ([submit("a"), submit("b", "y" * 20_000), submit("c")], FakeEtcd(), 128, ["ok", "refused", "ok"]),
])
def test_each_step_gets_its_own_outcome(steps: list, etcd: FakeEtcd, max_ops: int, expected: list[str]) -> None:
    outcomes = asyncio.run(store(etcd, max_ops).commit(steps))
    assert [outcome(o) for o in outcomes] == expected
    written = {key for keys in etcd.written for key in keys}
    for (step, _), result in zip(steps, outcomes):
        for job_id in step.jobs:          # a step told "refused" or "not written" left nothing behind
            assert (f"state/jobs/{job_id}" in written) == (result is None or "may still" in str(result))


def test_a_refused_steps_error_says_why_without_echoing_it() -> None:
    etcd = FakeEtcd()
    outcomes = asyncio.run(store(etcd).commit([submit("a"), submit("b", "y" * 20_000)]))
    message = str(outcomes[1])
    assert "specs record of 20,3" in message and "at most 30,000" in message and len(message) < 300
    assert etcd.written == [["state/specs/a", "state/tasks/a/000000", "state/jobs/a"]]
