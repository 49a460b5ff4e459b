"""Queue quotas through the real binaries on real cgroups (README, "Quotas and borrowing"):
a `max: {cpu: 1}` queue never runs more than 1 core on an idle 2-core node and `tcl why`
names the cap (also after a master restart); a submit past `max_pending_per_user` exits 1 naming the limit and writes
nothing; a cap lowered by SIGHUP stops no running task, and new starts wait until the
queue is back under it."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from testkit.procs import OneNodeCluster, cgroup_v1_usable, tcl, tcl_json, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
QUEUES = "queues:\n  a: {max: {cpu: %s}, max_pending_per_user: 3}\n  b: {}\n"
RELOADED = "queues:\n  a: {max: {cpu: %s}}\n  b: {}\n"
SPIN = ("sh", "-c", "while :; do :; done")      # busy: uses whatever core it is given


class Cluster(OneNodeCluster):
    def __init__(self, tmp: Path, max_cpu: str = "1") -> None:
        self.queues = tmp / "q.yaml"
        self.queues.write_text(QUEUES % max_cpu)
        super().__init__(tmp, "quota", ["--queues", str(self.queues), "--heartbeat-interval-s", "0.5"],
                         "--cpus", "2", "--memory", "2Gi")

    def submit(self, queue: str, tasks: int, cpu: str, *command: str, check: bool = True):  # type: ignore[no-untyped-def]
        return tcl(self.address, "submit", "--queue", queue, "--tasks", str(tasks), "--cpu", cpu, "--mem", "32Mi",
                   "--", *command, check=check)

    def running(self, job: str) -> int:
        reply = tcl_json(self.address, "status", job)
        return sum(t["state"] == "RUNNING" for t in reply["tasks"])   # type: ignore[index]

    def pending_reason(self, job: str) -> str:
        return str(tcl_json(self.address, "status", job)["pending_reason"])   # type: ignore[index]


@pytest.fixture
def cluster(tmp_path: Path):  # type: ignore[no-untyped-def]
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def test_a_queue_at_max_cpu_1_runs_1_core_on_an_idle_2_core_node(cluster: Cluster) -> None:
    job = cluster.submit("a", 3, "0.5", *SPIN).stdout.strip()
    wait_until(lambda: cluster.running(job) == 2, 30)
    wait_until(lambda: cluster.pending_reason(job) == "queue a at max cpu 1", 10)
    seen = []
    for _ in range(10):                        # rounds keep running (heartbeats, ticks): still 2
        seen.append(cluster.running(job))
        time.sleep(0.3)
    assert seen == [2] * 10
    why = tcl(cluster.address, "why", job).stdout
    assert "waits: queue a at max cpu 1" in why
    other = cluster.submit("b", 2, "0.5", "sleep", "600").stdout.strip()   # the other core is b's to take
    wait_until(lambda: cluster.running(other) == 2, 30)
    assert cluster.running(job) == 2
    tcl(cluster.address, "cancel", other)
    cluster.restart_master()                  # the quota is counted again from the stored tasks
    wait_until(lambda: cluster.pending_reason(job) == "queue a at max cpu 1", 30)
    time.sleep(2)
    assert cluster.running(job) == 2


def test_a_submit_past_max_pending_per_user_is_refused_and_writes_nothing(cluster: Cluster) -> None:
    # 1.5 cores a task: over the max, so they all wait.
    first = cluster.submit("a", 2, "1.5", "sleep", "600").stdout.strip()
    wait_until(lambda: "can never start" in cluster.pending_reason(first), 10)
    refused = cluster.submit("a", 2, "0.5", "sleep", "600", check=False)
    assert refused.returncode == 1
    assert "queue a: user anonymous at max_pending_per_user 3: 2 task(s) already waiting, this job adds 2" \
        in refused.stderr
    jobs = tcl_json(cluster.address, "jobs", "-a")
    assert [j["id"] for j in jobs] == [first]            # type: ignore[union-attr]
    tcl(cluster.address, "submit", "--queue", "a", "--cpu", "0.5", "--mem", "32Mi", "--", "true")   # 3: allowed
    assert cluster.submit("b", 5, "0.5", "true").returncode == 0   # another queue: no limit


def test_a_cap_lowered_by_sighup_stops_nothing_and_new_starts_wait(cluster: Cluster, tmp_path: Path) -> None:
    cluster.queues.write_text(RELOADED % "2")
    cluster.master.popen.send_signal(signal.SIGHUP)
    cluster.master.wait_for_output(r"queues reloaded from")
    four = cluster.submit("a", 4, "0.5", "sleep", "600").stdout.strip()
    wait_until(lambda: cluster.running(four) == 4, 30)
    cluster.queues.write_text(RELOADED % "1")
    cluster.master.popen.send_signal(signal.SIGHUP)
    later = cluster.submit("a", 1, "0.25", "sleep", "600").stdout.strip()
    wait_until(lambda: cluster.pending_reason(later) == "queue a at max cpu 1", 15)
    time.sleep(2)
    assert cluster.running(four) == 4           # over the new cap, and nobody killed
    tcl(cluster.address, "cancel", four, "--tasks", "0-2")
    wait_until(lambda: cluster.running(later) == 1, 30)   # 0.5 + 0.25 <= 1: it starts
