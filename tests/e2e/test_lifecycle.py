"""The lifecycle verbs through the real binaries on real cgroups (README, "Hold, release,
requeue, wait"), several checks through one cluster of 2 cores: hold then release (the
hold survives a master SIGKILL and restart), requeue of a running task (the next attempt
starts after the first ended; `tcl logs --attempt 1` still reads the first), `tcl wait`'s
exit codes, a multi-id and a filtered cancel, and `tcl update` of a held job's cpu."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Iterator

import pytest

from testkit.procs import (OneNodeCluster, cancel_every_job, cgroup_v1_usable, leaked_cgroups, start_agent, sweep_node,
                           tcl, tcl_json, wait_job, wait_until)

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}


class Cluster(OneNodeCluster):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, "life", ["--heartbeat-interval-s", "0.5"], "--cpus", "2", "--memory", "2Gi")

    def tcl(self, *args: str, check: bool = True) -> str:
        return tcl(self.address, *args, check=check).stdout.strip()

    def submit(self, *args: str) -> str:
        return self.tcl("submit", "--mem", "16Mi", *args)

    def status(self, job_id: str) -> dict:
        return tcl_json(self.address, "status", job_id)   # type: ignore[return-value]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("life"))
    try:
        yield c
    finally:
        c.stop()


def test_hold_keeps_a_job_waiting_across_a_master_restart_and_release_runs_it(cluster: Cluster) -> None:
    blocker = cluster.submit("--cpu", "2", "--", "sleep", "600")
    wait_job(cluster.address, blocker, {"RUNNING"})
    job = cluster.submit("--cpu", "1", "--", "true")
    assert cluster.tcl("hold", job) == f"{job}: held (PENDING (held))"
    # pending work only: a job with nothing pending is refused, naming why
    refused = tcl(cluster.address, "hold", blocker, check=False)
    assert refused.returncode == 1 and "nothing pending to hold" in refused.stderr
    # a held job's request may change (checked as at submit): past every node's cores refused, else applied
    too_big = tcl(cluster.address, "update", job, "--cpu", "64", check=False)
    assert too_big.returncode == 1 and "cpu" in too_big.stderr, too_big.stderr
    assert "cpu 0.5," in cluster.tcl("update", job, "--cpu", "0.5")
    assert cluster.status(job)["resources"]["cpu"] == 0.5
    running = tcl(cluster.address, "update", blocker, "--cpu", "1", check=False)
    assert running.returncode == 1 and "running or starting" in running.stderr
    assert cluster.tcl("cancel", blocker) == "CANCELLED"
    wait_until(lambda: all(t["finished_at"] for t in cluster.status(blocker)["tasks"]), 60)
    cluster.restart_master()
    shown = cluster.status(job)
    assert shown["state"] == "PENDING" and shown["held_by"] and "held by" in shown["pending_reason"]
    assert "held" in cluster.tcl("why", job)
    assert "PENDING (held)" in cluster.tcl("jobs")
    assert cluster.tcl("release", job).startswith(f"{job}: released (")
    assert wait_job(cluster.address, job, DONE)["state"] == "SUCCEEDED"


def test_requeue_stops_the_running_attempt_before_the_next_starts(cluster: Cluster) -> None:
    job = cluster.submit("--cpu", "0.5", "--", "sh", "-c", 'echo "attempt $TCL_ATTEMPT"; exec sleep 600')
    wait_job(cluster.address, job, {"RUNNING"})
    wait_until(lambda: "attempt 1" in cluster.tcl("logs", job), 30)
    assert cluster.tcl("requeue", job).startswith(f"{job}: requeued")
    wait_until(lambda: cluster.status(job)["tasks"][0]["attempt"] == 2
               and cluster.status(job)["tasks"][0]["state"] == "RUNNING", 90)
    wait_until(lambda: "attempt 2" in cluster.tcl("logs", job), 30)
    assert cluster.tcl("logs", job, "--attempt", "1") == "attempt 1"
    history = tcl_json(cluster.address, "history", "--since", "now-1hours")
    ends = [r for r in history if r["job_id"] == job]   # type: ignore[union-attr, index]
    assert [r["attempt"] for r in ends] == [1]           # the first attempt ended before the second ran
    cluster.tcl("cancel", job)
    done = cluster.submit("--cpu", "0.5", "--", "true")
    wait_job(cluster.address, done, DONE)
    cluster.tcl("requeue", done)                          # an ended task waits again and runs as attempt 2
    finished = wait_job(cluster.address, done, DONE)
    assert finished["state"] == "SUCCEEDED" and finished["tasks"][0]["attempt"] == 2


def test_wait_exit_codes(cluster: Cluster) -> None:
    ok = cluster.submit("--cpu", "0.5", "--", "true")
    bad = cluster.submit("--cpu", "0.5", "--", "sh", "-c", "exit 3")
    assert tcl(cluster.address, "wait", ok, check=False).returncode == 0
    assert tcl(cluster.address, "wait", ok, bad, check=False).returncode == 3
    slow = cluster.submit("--cpu", "0.5", "--", "sleep", "600")
    timed_out = tcl(cluster.address, "wait", slow, "--timeout", "2s", check=False)
    assert timed_out.returncode == 124 and slow in timed_out.stderr
    cluster.tcl("cancel", slow)
    assert tcl(cluster.address, "wait", slow, check=False).returncode == 1     # cancelled


def test_cancel_several_ids_and_by_filter(cluster: Cluster) -> None:
    assert tcl(cluster.address, "cancel", check=False).returncode == 2
    name = f"f{uuid.uuid4().hex[:6]}"
    a, b = (cluster.submit("--cpu", "0.1", "--", "sleep", "600") for _ in range(2))
    named = [cluster.submit("--cpu", "0.1", "--name", name, "--", "sleep", "600") for _ in range(2)]
    assert cluster.tcl("cancel", a, b).splitlines() == [f"{a}: CANCELLED", f"{b}: CANCELLED"]
    assert cluster.tcl("cancel", "--name", name).splitlines() == [f"{j}: CANCELLED" for j in named]
    for job_id in (a, b, *named):
        wait_until(lambda: all(t["finished_at"] for t in cluster.status(job_id)["tasks"]), 60)


def test_logs_of_an_earlier_attempt_come_from_its_node_and_unlimited_memory_avoids_forbidding_nodes(
        cluster: Cluster) -> None:
    """A second agent started with --no-unlimited-memory: `tcl logs --attempt 1` reads the node
    that ran attempt 1 after attempt 2 moved to the other node; a `--mem unlimited` job waits
    for a node that allows it (its reason names the label) instead of failing at start."""
    strict = f"e2e-strict-{uuid.uuid4().hex[:6]}"
    agent = start_agent(cluster.tmp, cluster.address, strict, "--runtime", "cgroup1", "--cpus", "2",
                        "--memory", "2Gi", "--heartbeat-interval-s", "0.5", "--no-unlimited-memory")
    try:
        cluster.tcl("node", "cordon", strict)
        job = cluster.submit("--cpu", "0.2", "--", "sh", "-c", 'echo "attempt $TCL_ATTEMPT"; exec sleep 600')
        wait_job(cluster.address, job, {"RUNNING"})
        assert cluster.status(job)["tasks"][0]["node"] == cluster.node
        wait_until(lambda: "attempt 1" in cluster.tcl("logs", job), 30)
        cluster.tcl("node", "uncordon", strict)
        cluster.tcl("node", "cordon", cluster.node)
        cluster.tcl("requeue", job)
        wait_until(lambda: cluster.status(job)["tasks"][0]["attempt"] == 2
                   and cluster.status(job)["tasks"][0]["state"] == "RUNNING", 90)
        assert cluster.status(job)["tasks"][0]["node"] == strict
        wait_until(lambda: "attempt 2" in cluster.tcl("logs", job), 30)
        assert cluster.tcl("logs", job, "--attempt", "1") == "attempt 1"      # from the first node
        assert cluster.tcl("logs", job, "--attempt", "2") == "attempt 2"
        cluster.tcl("cancel", job)

        unlimited = cluster.tcl("submit", "--mem", "unlimited", "--cpu", "0.1", "--", "true")
        wait_until(lambda: "memory-limit-required" in cluster.status(unlimited).get("pending_reason", ""), 30)
        assert cluster.status(unlimited)["state"] == "PENDING"
        why = cluster.tcl("why", unlimited)
        assert "tcluster.io/memory-limit-required" in why, why
        cluster.tcl("node", "uncordon", cluster.node)
        done = wait_job(cluster.address, unlimited, DONE)
        assert done["state"] == "SUCCEEDED" and done["tasks"][0]["node"] == cluster.node, done
    finally:
        tcl(cluster.address, "node", "uncordon", cluster.node, check=False)
        cancel_every_job(cluster.address)
        agent.stop()
        sweep_node(strict, cluster.tmp / strict)
    assert leaked_cgroups(strict) == []
