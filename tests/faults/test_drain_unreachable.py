"""A requeue never outruns the fence (issue 36 #1). The review drained a node that had gone
silent with `--deadline`: at the deadline its task got a requeue stop that could not reach
the node, the lost timeout put it back to PENDING and it started elsewhere, while the old
copy (a job without --retries: no agent fences it) kept running: two copies for as long
as the node was cut off. Now such a task waits on its node until the node confirms the end
(its agent is back: the stop is sent again, the copy ends, then it starts elsewhere) or an
admin declares the machine dead (`tcl node forget`)."""

from __future__ import annotations

import time

import pytest

from testkit.faultcluster import Cluster, task_cgroups
from tests.faults.watch import Watch

pytestmark = pytest.mark.system
LOST_TIMEOUT_S = 4.0
KEEPALIVE_S = 10.0 + 5.0      # a paused agent's open stream is found dead by keepalive


def _silent_drained_node(cluster: Cluster) -> tuple[str, str, str]:
    """A job without retries running on node a, a second node b, a's agent paused (its task
    goes on), a drained with a 1 s deadline, and the lost timeout passed: (job, a, b)."""
    cluster.node_timeout_s, cluster.lost_timeout_s = 2.0, LOST_TIMEOUT_S
    cluster.start_master()
    a = cluster.start_agent("silent").name
    job_id = cluster.submit("sleep", "300")
    cluster.wait_task(job_id, lambda t: t["state"] == "RUNNING" and t["node"] == a, f"RUNNING on {a}")
    b = cluster.start_agent("spare").name
    cluster.pause_agent(a)
    cluster.tcl("node", "drain", a, "--deadline", "1s", "--reason", "node unresponsive")
    cluster.wait_node(a, "DOWN", timeout_s=KEEPALIVE_S + 20)
    time.sleep(LOST_TIMEOUT_S + 3.0)              # past the deadline and the lost timeout
    return job_id, a, b


def _waits_on(cluster: Cluster, job_id: str, a: str, b: str) -> None:
    task = cluster.status(job_id)["tasks"][0]
    assert (task["state"], task["node"], task["attempt"]) == ("RUNNING", a, 1), task
    assert f"waiting for node {a} to confirm the stop" in task["reason"], task["reason"]
    assert task_cgroups(b) == [], "a second copy started"


@pytest.mark.parametrize("cluster", ["sqlite"], indirect=True)    # the core's rule, not the store's
def test_a_drained_silent_node_s_task_waits_for_its_agent_then_runs_once_elsewhere(cluster: Cluster) -> None:
    job_id, a, b = _silent_drained_node(cluster)
    watch = Watch(lambda: cluster.address, lambda: [a, b]).start()
    watch.watch(job_id)
    try:
        _waits_on(cluster, job_id, a, b)
        cluster.resume_agent(a)                   # back: the stop is sent again, the copy ends
        task = cluster.wait_task(job_id, lambda t: t["state"] == "RUNNING" and t["node"] == b,
                                 f"RUNNING on {b}")["tasks"][0]
        assert task["attempt"] == 2 and task_cgroups(a) == []
        time.sleep(1.0)
    finally:
        violations = watch.stop()
    assert violations == []                       # never two attempts' cgroups at once
    cluster.tcl("cancel", job_id)


@pytest.mark.parametrize("cluster", ["sqlite"], indirect=True)
def test_tcl_node_forget_declares_the_machine_dead_and_the_task_runs_elsewhere(cluster: Cluster) -> None:
    job_id, a, b = _silent_drained_node(cluster)
    _waits_on(cluster, job_id, a, b)
    refused = cluster.tcl("node", "forget", b, check=False)
    assert refused.returncode == 1 and "is connected" in refused.stderr, refused.stderr
    cluster.tcl("node", "forget", a, "--reason", "PSU failed")
    task = cluster.wait_task(job_id, lambda t: t["state"] == "RUNNING" and t["node"] == b, f"RUNNING on {b}")["tasks"][0]
    assert task["attempt"] == 2
    cluster.resume_agent(a)                       # the machine was not dead after all: its copy is unwanted
    cluster.wait_registered(a)
    deadline = time.monotonic() + 30
    while task_cgroups(a) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert task_cgroups(a) == []
    cluster.tcl("cancel", job_id)
