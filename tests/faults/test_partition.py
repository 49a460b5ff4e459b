"""Scenario 6: a network partition between one agent and the master, longer than twice
the node timeout, then healed."""

from __future__ import annotations

import time

import pytest

from testkit.faultcluster import Cluster, wait_for
from tests.faults.watch import Watch, check_consistent

pytestmark = pytest.mark.system
JOBS = 2
TASK_S = 14          # long enough to outlive the partition on the cut-off node
NODE_TIMEOUT_S = 2.0
PARTITION_S = 3 * NODE_TIMEOUT_S + 2.0   # > 2 x node timeout, and past DOWN + LOST


def test_partition_never_runs_two_attempts_and_ends_each_task_once(cluster: Cluster) -> None:
    """Proves: when one agent is cut off (blackhole: no FIN, no RST) longer than twice the
    node timeout, jobs with --retries 1 that ran there are run again elsewhere without ever
    having two attempts of a task alive at once (the cut-off agent fences its copies before
    the master starts new ones), and after the heal the agent's late report of an old attempt
    changes nothing: every task ends exactly once and the jobs succeed."""
    cluster.node_timeout_s, cluster.lost_timeout_s = NODE_TIMEOUT_S, NODE_TIMEOUT_S
    cluster.start_master()
    a = cluster.start_agent("part-a", proxied=True)
    job_ids = [cluster.submit("sh", "-c", f"sleep {TASK_S}", retries=1) for _ in range(JOBS)]
    for job_id in job_ids:
        cluster.wait_task(job_id, lambda t: t["state"] == "RUNNING" and t["node"] == a.name, f"RUNNING on {a.name}")
    b = cluster.start_agent("part-b")
    watch = Watch(lambda: cluster.address, lambda: [a.name, b.name]).start()
    watch.watch(*job_ids)
    try:
        assert a.proxy is not None
        a.proxy.cut("blackhole")
        cluster.wait_node(a.name, "DOWN", timeout_s=PARTITION_S)
        time.sleep(PARTITION_S)          # the partition lasts; the watch samples cgroups throughout
        a.proxy.heal()
        jobs = [cluster.wait_job(job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout_s=TASK_S + 30)
                for job_id in job_ids]
        cluster.wait_node(a.name, "READY", timeout_s=30)   # the agent is back and has reported
        wait_for(lambda: watch.samples > 0, 5, "cgroup samples")
        time.sleep(1.0)                  # late reports of old attempts: the watch must see nothing change
        after = [cluster.status(job_id) for job_id in job_ids]
    finally:
        violations = watch.stop()
    assert violations == []
    assert [_outcome(j) for j in after] == [_outcome(j) for j in jobs], "the master's view changed after the jobs ended"
    for job in jobs:
        assert job["state"] == "SUCCEEDED", job
        assert check_consistent(job, retries=1) == []


def _outcome(job: dict) -> tuple[object, ...]:
    return job["state"], [(t["state"], t["attempt"], t["node"], t["exit_code"], t["reason"]) for t in job["tasks"]]
