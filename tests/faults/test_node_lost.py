"""Scenario 2: the master restarts while one agent never comes back."""

from __future__ import annotations

import signal

import pytest

from testkit.faultcluster import Cluster, wait_for
from tests.faults.watch import Watch, check_consistent

pytestmark = pytest.mark.system


def test_a_node_that_never_returns_is_down_then_its_task_lost_and_retried_elsewhere(cluster: Cluster) -> None:
    """Proves: nodes loaded at master start are DOWN until they register, and the timeouts
    run from master start, so a node that never returns after a master restart goes DOWN,
    its task becomes LOST (the reason says so), and with --retries 1 the task runs again on
    the live node as attempt 2 and the job ends SUCCEEDED, each step exactly once."""
    cluster.node_timeout_s, cluster.lost_timeout_s = 2.0, 2.0
    cluster.start_master()
    a = cluster.start_agent("lost-a")
    job_id = cluster.submit("sh", "-c", "sleep 3", retries=1)
    job = cluster.wait_task(job_id, lambda t: t["state"] == "RUNNING", "RUNNING")
    assert job["tasks"][0]["node"] == a.name and job["tasks"][0]["attempt"] == 1
    b = cluster.start_agent("lost-b")
    cluster.kill_master(signal.SIGKILL)
    cluster.kill_agent(a.name, signal.SIGKILL)
    cluster.start_master()
    watch = Watch(lambda: cluster.address, lambda: [b.name]).start()
    watch.watch(job_id)
    try:
        assert cluster.wait_node(a.name, "DOWN", timeout_s=30)["state"] == "DOWN"
        lost = _wait_lost(cluster, job_id)
        reason = lost["tasks"][0]["reason"].lower()
        assert "lost" in reason or "down" in reason or a.name in reason, lost["tasks"][0]
        job = cluster.wait_job(job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout_s=60)
    finally:
        violations = watch.stop()
    task = job["tasks"][0]
    assert job["state"] == "SUCCEEDED", job
    assert (task["state"], task["node"], task["attempt"], task["exit_code"]) == ("SUCCEEDED", b.name, 2, 0), task
    assert task.get("failures") == 1, task
    assert check_consistent(job, retries=1) == []
    assert violations == []
    assert cluster.nodes()[a.name]["state"] == "DOWN"


def _wait_lost(cluster: Cluster, job_id: str) -> dict:
    """The task is seen LOST, or already moved on to attempt 2 with one failure counted
    (a poll can miss a short-lived LOST); returns the job as seen."""
    def check() -> dict | None:
        job = cluster.status(job_id)
        task = job["tasks"][0]
        moved_on = task["attempt"] >= 2 and task.get("failures", 0) >= 1
        return job if task["state"] == "LOST" or moved_on else None
    return wait_for(check, 30, f"task of {job_id} LOST after its node stayed down", interval_s=0.1)
