"""The cluster helper itself: a master and a proxied agent run one job; the watch sees it."""

from __future__ import annotations

from tests.faults.cluster import Cluster, task_cgroups
from tests.faults.watch import Watch, check_consistent


def test_a_job_runs_through_a_proxied_agent(cluster: Cluster) -> None:
    cluster.start_master()
    agent = cluster.start_agent("smoke", proxied=True)
    watch = Watch(lambda: cluster.address, lambda: list(cluster.agents)).start()
    job_id = cluster.submit("sh", "-c", "sleep 3; echo hi")   # long enough for a `tcl status` poll to see RUNNING
    watch.watch(job_id)
    cluster.wait_task(job_id, lambda t: t["state"] == "RUNNING", "RUNNING")
    assert [k.startswith(f"{job_id}.0.") for k in task_cgroups(agent.name)] == [True]
    job = cluster.wait_job(job_id, {"SUCCEEDED", "FAILED"})
    assert job["state"] == "SUCCEEDED" and job["tasks"][0]["node"] == agent.name
    assert watch.stop() == [] and watch.samples > 0
    assert cluster.tcl("logs", job_id).stdout == "hi\n"
