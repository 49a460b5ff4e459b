"""The cluster helper itself: a master and a proxied agent run jobs; the watch sees them."""

from __future__ import annotations

from testkit.faultcluster import Cluster, split_key, task_cgroups, wait_for
from tests.faults.watch import Watch, check_consistent


def test_jobs_run_through_a_proxied_agent(cluster: Cluster) -> None:
    """Proves the helpers work: a running task shows as one cgroup key of its attempt, a
    cancel removes it, a job's output comes back through `tcl logs`, the watch saw no breach."""
    cluster.start_master()
    agent = cluster.start_agent("smoke", proxied=True)
    watch = Watch(lambda: cluster.address, lambda: list(cluster.agents)).start()
    sleeper = cluster.submit("sleep", "300")
    echo = cluster.submit("sh", "-c", "echo hi")
    watch.watch(sleeper, echo)
    try:
        job = cluster.wait_task(sleeper, lambda t: t["state"] == "RUNNING", "RUNNING")
        task = job["tasks"][0]
        assert [split_key(k) for k in task_cgroups(agent.name) if k.startswith(sleeper)] == [(task["id"], 1)]
        cluster.tcl("cancel", sleeper)
        wait_for(lambda: not [k for k in task_cgroups(agent.name) if k.startswith(sleeper)], 30, "cgroup removed")
        done = cluster.wait_job(echo, {"SUCCEEDED", "FAILED"})
        killed = cluster.wait_task(sleeper, lambda t: t["state"] == "KILLED", "KILLED")
    finally:
        violations = watch.stop()
    assert done["state"] == "SUCCEEDED" and done["tasks"][0]["node"] == agent.name
    assert cluster.tcl("logs", echo).stdout == "hi\n"
    assert killed["state"] == "CANCELLED" and check_consistent(killed) == []
    assert violations == [] and watch.samples > 0
