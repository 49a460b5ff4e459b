"""A host that dies without closing its connections (here: its agent SIGSTOPped, so nothing
answers and the TCP connection stays open) while its agent is quiet: with liveness apart
from usage (issue 26) the master hears nothing from a quiet node for a whole usage interval
by design, so what finds the dead host is gRPC keepalive (tcluster/domain/bounds.py: a ping every
10 s, 5 s to answer), long before the silence limit (node timeout + two usage intervals)."""

from __future__ import annotations

import time

import pytest

from testkit.faultcluster import Cluster

pytestmark = pytest.mark.system

USAGE_INTERVAL_S = 30.0       # the silence limit is then 2 + 2 x 30 = 62 s
KEEPALIVE_S = 10.0 + 5.0      # ping interval + ping timeout, both ends (tcluster/domain/bounds.py)


@pytest.mark.parametrize("cluster", ["sqlite"], indirect=True)   # the stream's life, not the store's
def test_a_paused_quiet_agent_is_down_by_keepalive_and_comes_back_with_its_task(cluster: Cluster) -> None:
    """Proves: a quiet agent that stops answering (SIGSTOP) is DOWN once keepalive closes its
    stream — within the keepalive window plus slack, well before the 62 s silence limit it
    would otherwise wait for — and after SIGCONT it registers again, READY, with its task
    still RUNNING on its first attempt (the lost timeout had not passed)."""
    cluster.node_timeout_s, cluster.lost_timeout_s = 2.0, 120.0
    cluster.start_master()
    agent = cluster.start_agent("paused", extra=("--usage-interval-s", str(USAGE_INTERVAL_S)))
    job_id = cluster.submit("sleep", "300")
    cluster.wait_task(job_id, lambda t: t["state"] == "RUNNING", "RUNNING")
    time.sleep(1.0)                               # the start's reports are out: the agent is quiet now
    cluster.pause_agent(agent.name)
    paused = time.monotonic()
    try:
        cluster.wait_node(agent.name, "DOWN", timeout_s=KEEPALIVE_S + 15)
        print(f"DOWN {time.monotonic() - paused:.1f} s after SIGSTOP (keepalive window {KEEPALIVE_S:.0f} s, "
              f"silence limit {cluster.node_timeout_s + 2 * USAGE_INTERVAL_S:.0f} s)")
    finally:
        cluster.resume_agent(agent.name)
    cluster.wait_node(agent.name, "READY", timeout_s=30)
    task = cluster.status(job_id)["tasks"][0]
    assert (task["state"], task["attempt"], task["node"]) == ("RUNNING", 1, agent.name), task
    cluster.tcl("cancel", job_id)
    assert cluster.wait_job(job_id, {"CANCELLED", "SUCCEEDED", "FAILED"})["state"] == "CANCELLED"
