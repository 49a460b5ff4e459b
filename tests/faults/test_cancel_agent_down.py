"""Scenario 3: a job is cancelled while its agent is down."""

from __future__ import annotations

import signal

import pytest

from testkit.faultcluster import Cluster, task_cgroups, wait_for
from tests.faults.watch import Watch, check_consistent

# guest: what the agent finds and kills after a restart comes from its cgroup backend, so
# tests/vm reruns this on cgroup v2 (on SQLite: the guest has no etcd).
pytestmark = [pytest.mark.system, pytest.mark.guest]
KILL_GRACE_S = 10.0      # the master's default grace for a cancel
MARGIN_S = 15.0          # reconnect backoff (<= ~5 s) + heartbeats + the kill itself


def test_cancel_while_the_agent_is_down_kills_the_task_once_it_returns(cluster: Cluster) -> None:
    """Proves: kill intent is state. A job cancelled while its agent is SIGKILLed is
    CANCELLED at once; when the agent returns, the task's processes are killed within the
    grace period (its cgroup is removed), and the task ends KILLED exactly once."""
    cluster.node_timeout_s, cluster.lost_timeout_s = 2.0, 60.0   # LOST must not preempt KILLED
    cluster.start_master()
    a = cluster.start_agent("cancel")
    job_id = cluster.submit("sleep", "300")
    cluster.wait_task(job_id, lambda t: t["state"] == "RUNNING", "RUNNING")
    key = f"{job_id}.0.1"
    assert key in task_cgroups(a.name)
    watch = Watch(lambda: cluster.address, lambda: [a.name]).start()
    watch.watch(job_id)
    try:
        cluster.kill_agent(a.name, signal.SIGKILL)
        assert key in task_cgroups(a.name), "a SIGKILLed agent leaves its tasks running"
        cluster.tcl("cancel", job_id)
        assert cluster.wait_job(job_id, {"CANCELLED"}, timeout_s=10)["state"] == "CANCELLED"
        cluster.restart_agent(a.name)
        wait_for(lambda: key not in task_cgroups(a.name), KILL_GRACE_S + MARGIN_S,
                 f"cgroup of {key} removed after the agent returned")
        job = cluster.wait_task(job_id, lambda t: t["state"] == "KILLED", "KILLED", timeout_s=MARGIN_S)
    finally:
        violations = watch.stop()
    assert job["state"] == "CANCELLED" and job["tasks"][0]["attempt"] == 1, job
    assert check_consistent(job) == []
    assert violations == []
    assert task_cgroups(a.name) == []
