"""Scenario 4: a job is cancelled right after submit, racing its launch."""

from __future__ import annotations

import time

import pytest

from testkit.faultcluster import Cluster, split_key, task_cgroups, wait_for
from tests.faults.watch import Watch, check_consistent
from tcluster.v1 import common_pb2, jobs_pb2

# Not rerun in the tests/vm guest: no agent restarts here, and the kill a cancel causes is
# the runtime's (tests/system/test_cgroup_runtime.py runs it on cgroup v2 there).
pytestmark = [pytest.mark.system]
# submit -> cancel: pending, placed, launching, running; None: as soon as a task is STARTING
DELAYS_S: tuple[float | None, ...] = (0.0, 0.0, 0.02, 0.05, 0.1, 0.2, 0.4, None, None)
KILL_BOUND_S = 25.0                                   # grace (10 s) + a bounded margin


def _submit_and_cancel(cluster: Cluster, delay_s: float | None) -> str:
    spec = jobs_pb2.JobSpec(command=["sleep", "300"], tasks=2)
    spec.resources.cpu, spec.resources.memory = 0.1, 64 * 2**20
    job = cluster.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec), timeout=10)
    if delay_s is None:
        wait_for(lambda: _placed(cluster, job.id), 10, f"a task of {job.id} STARTING", interval_s=0.002)
    else:
        time.sleep(delay_s)
    cluster.jobs.Cancel(jobs_pb2.CancelJobRequest(id=job.id), timeout=10)
    return job.id


def test_cancel_racing_the_launch_leaves_no_process_and_ends_each_task_once(cluster: Cluster) -> None:
    """Proves: whatever moment a cancel lands (before placement, between placement and the
    agent's launch, during the launch), no task process survives it, and every task ends
    exactly once (KILLED, never RUNNING again afterwards)."""
    cluster.start_master()
    a = cluster.start_agent("race")
    watch = Watch(lambda: cluster.address, lambda: [a.name]).start()
    job_ids = []
    try:
        for delay_s in DELAYS_S:
            job_ids.append(_submit_and_cancel(cluster, delay_s))
            watch.watch(job_ids[-1])
        jobs = [cluster.wait_job(job_id, {"CANCELLED", "FAILED", "SUCCEEDED"}, timeout_s=15) for job_id in job_ids]
        wait_for(lambda: not _cgroups_of(a.name, job_ids), KILL_BOUND_S, "every cancelled task's cgroup removed")
        final = [cluster.wait_ended(job_id) for job_id in job_ids]
        time.sleep(1.0)   # let late agent reports arrive: the watch must see nothing change
    finally:
        violations = watch.stop()
    assert [j["state"] for j in jobs] == ["CANCELLED"] * len(DELAYS_S)
    for job in final:
        assert [t["state"] for t in job["tasks"]] == ["KILLED", "KILLED"], job
        assert check_consistent(job) == []
    assert violations == []


def _placed(cluster: Cluster, job_id: str) -> bool:
    tasks = cluster.jobs.Get(jobs_pb2.GetJobRequest(id=job_id), timeout=10).tasks
    return any(t.state != common_pb2.TASK_PENDING for t in tasks)


def _cgroups_of(node: str, job_ids: list[str]) -> list[str]:
    return [key for key in task_cgroups(node) if split_key(key)[0].rpartition(".")[0] in job_ids]
