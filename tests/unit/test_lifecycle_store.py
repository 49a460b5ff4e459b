"""What the lifecycle verbs leave on disk (README, "Hold, release, requeue, wait"): a hold
and a pending job's updated spec are in the store's rows, SQLite and etcd alike, so a
master restart or failover keeps them; and `tcl wait`'s exit code, timeout and retries
across an unreachable master, with a fake client."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from tcluster.cli import lifecycle
from tcluster.domain.model import Job, JobSpec
from tcluster.domain.resources import Resources
from tcluster.master.core.events import Step
from tcluster.master.store.etcdplan import step_writes
from tcluster.master.store.etcdrecords import job_record
from tcluster.master.store.sqlite import Store
from tcluster.master.store.sqlrows import coalesce
from tcluster.v1 import common_pb2, jobs_pb2

SPEC = JobSpec(("true",), Resources(0.5, 2**20), queue="default")
NEW = replace(SPEC, resources=Resources(2, 2**30), weight=3.0, time_limit_s=60.0)


def test_sqlite_keeps_a_hold_and_an_updated_spec(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    store = Store(db)
    job = Job("j1", SPEC, 1.0)
    store.apply(Step(jobs={"j1": job}), new_jobs=["j1"])
    store.apply(Step(jobs={"j1": replace(job, spec=NEW, held_by="alice")}, specs={"j1"}))
    store.close()
    again = Store(db)
    loaded = again.load_jobs()[0]
    assert loaded.spec == NEW and loaded.held_by == "alice"
    again.close()


def test_a_spec_change_survives_the_merge_of_a_batch() -> None:
    job = Job("j1", SPEC, 1.0)
    merged = coalesce([(Step(jobs={"j1": replace(job, spec=NEW)}, specs={"j1"}), []),
                       (Step(jobs={"j1": replace(job, spec=NEW, held_by="a")}), [])])
    assert [step.specs for step, _ in merged] == [{"j1"}]


def test_etcd_writes_an_updated_spec_before_the_job_key_and_keeps_the_hold() -> None:
    job = replace(Job("j1", NEW, 1.0), held_by="alice")
    writes = step_writes(Step(jobs={"j1": job}, specs={"j1"}), set(), [])
    assert [key for key, _ in writes] == ["state/specs/j1", "state/jobs/j1"]
    assert json.loads(job_record(job))[4] == json.dumps({"held_by": "alice"}, separators=(",", ":"))
    assert [key for key, _ in step_writes(Step(jobs={"j1": job}), set(), [])] == ["state/jobs/j1"]


# ---- tcl wait ----

def job_msg(job_id: str, state: int, *tasks: tuple[int, int, int]) -> jobs_pb2.Job:
    """tasks: (task state, exit code, signal)."""
    return jobs_pb2.Job(id=job_id, state=state, tasks=[
        jobs_pb2.Task(index=i, state=s, has_exit_code=not sig, exit_code=code, signal=sig)
        for i, (s, code, sig) in enumerate(tasks)])


FAILED, SUCCEEDED = common_pb2.TASK_FAILED, common_pb2.TASK_SUCCEEDED


@pytest.mark.parametrize("jobs, code", [
    ([job_msg("a", jobs_pb2.JOB_SUCCEEDED, (SUCCEEDED, 0, 0))], 0),
    ([job_msg("a", jobs_pb2.JOB_SUCCEEDED), job_msg("b", jobs_pb2.JOB_FAILED, (FAILED, 3, 0), (FAILED, 7, 0))], 7),
    ([job_msg("a", jobs_pb2.JOB_FAILED, (FAILED, 0, 9))], 137),          # killed by SIGKILL: 128+9
    ([job_msg("a", jobs_pb2.JOB_CANCELLED)], 1),
    ([job_msg("a", jobs_pb2.JOB_FAILED, (FAILED, 124, 0))], 1),          # 124 stays --timeout's
])
def test_wait_exit_code(jobs: list[jobs_pb2.Job], code: int) -> None:
    assert lifecycle.wait_exit_code(jobs) == code


class Unreachable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection refused"


class FakeClient:
    """Answers Get from a script of replies per job; an exception in it is raised."""

    def __init__(self, script: dict[str, list[object]]) -> None:
        self.script = script

    def get(self, job_id: str) -> jobs_pb2.Job:
        answers = self.script[job_id]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, jobs_pb2.Job)
        return answer


def run_wait(script: dict[str, list[object]], timeout: str | None = None) -> int:
    now = [0.0]
    args = argparse.Namespace(job_ids=list(script), timeout=timeout, output="table")
    return lifecycle.wait(args, FakeClient(script), clock=lambda: now[0],  # type: ignore[arg-type]
                          sleep=lambda s: now.__setitem__(0, now[0] + s))


def test_wait_rides_out_an_unreachable_master() -> None:
    running, done = job_msg("a", jobs_pb2.JOB_RUNNING), job_msg("a", jobs_pb2.JOB_FAILED, (FAILED, 5, 0))
    assert run_wait({"a": [running, Unreachable(), Unreachable(), done]}) == 5


def test_wait_gives_up_at_its_timeout_with_124() -> None:
    assert run_wait({"a": [job_msg("a", jobs_pb2.JOB_RUNNING)]}, timeout="30s") == lifecycle.EXIT_WAIT_TIMEOUT
