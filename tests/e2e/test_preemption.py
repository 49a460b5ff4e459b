"""Preemption through the real binaries on real cgroups (README, "Preemption"): two
departments reach 50/50 and stay there; a protected queue is never touched; a job that
asked `--on-preempt cancel` is cancelled; a master killed mid-preemption neither loses
the kill nor preempts twice. The timings each test measures are printed (-s) for the
notes; none is asserted beyond the issue's bound, with slack for a loaded machine."""

from __future__ import annotations

import json
import re
import urllib.request
import time
from pathlib import Path

import pytest

from testkit.procs import (
    OneNodeCluster, cgroup_v1_usable, tcl, tcl_json, wait_job, wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
AFTER_S, GRACE_S = 2.0, 2.0
QUEUES = "queues:\n  a: {weight: 1}\n  b: {weight: 1}\n"
FLAGS = ("--preemption", "--preempt-after-s", str(AFTER_S), "--preempt-grace-s", str(GRACE_S),
         "--preempt-min-runtime-s", "1", "--heartbeat-interval-s", "0.5")


class Cluster(OneNodeCluster):
    """One master (with the given queue file) and one 2-core agent."""

    def __init__(self, tmp: Path, queues: str = QUEUES, grace_s: float = GRACE_S) -> None:
        (tmp / "q.yaml").write_text(queues)
        flags = [*FLAGS, "--queues", str(tmp / "q.yaml"), "--http", "127.0.0.1:0"]
        flags[flags.index("--preempt-grace-s") + 1] = str(grace_s)
        super().__init__(tmp, "pre", flags, "--cpus", "2", "--memory", "2Gi")
        self.http = self.master.wait_for_output(r"dashboard on (http://127\.0\.0\.1:\d+)/").group(1)

    def submit(self, queue: str, tasks: int, *command: str, extra: tuple[str, ...] = ()) -> str:
        return tcl(self.address, "submit", "--queue", queue, "--tasks", str(tasks), "--cpu", "0.5", "--mem", "32Mi",
                   *extra, "--", *command).stdout.strip()

    def shares(self) -> dict[str, float]:
        reply = tcl_json(self.address, "queues")
        return {q["path"]: round(q["dominant_share"], 3) for q in reply["queues"] if not q["user"]}   # type: ignore[index]


def running(job: dict) -> int:
    return sum(t["state"] == "RUNNING" for t in job["tasks"])


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    c = Cluster(tmp_path, **getattr(request, "param", {}))
    try:
        yield c
    finally:
        c.stop()


SLEEPER = ("sh", "-c", 'echo "preempted=${TCL_PREEMPTED:-0} attempt=$TCL_ATTEMPT index=$TCL_TASK_INDEX"; sleep 600')


def test_two_departments_reach_half_each_and_stay(cluster: Cluster) -> None:
    a = cluster.submit("a", 4, *SLEEPER)
    wait_until(lambda: running(wait_job(cluster.address, a, {"RUNNING"})) == 4, 30)
    time.sleep(1.2)                                             # past --preempt-min-runtime-s
    b = cluster.submit("b", 2, "sleep", "600")
    took = wait_until(lambda: cluster.shares() == {"a": 0.5, "b": 0.5}, AFTER_S + GRACE_S + 15)
    print(f"\n50/50 reached {took:.1f}s after b's submit (--preempt-after-s {AFTER_S} --preempt-grace-s {GRACE_S})")
    time.sleep(AFTER_S + GRACE_S + 1)                           # stays: a, now below nothing, never takes back
    assert cluster.shares() == {"a": 0.5, "b": 0.5}
    job = tcl_json(cluster.address, "status", a)
    victims = [t for t in job["tasks"] if t["preemptions"]]      # type: ignore[index]
    assert len(victims) == 2 and all(t["state"] == "PENDING" and t["failures"] == 0 for t in victims)
    assert all(re.match(rf"attempt 1 Preempted by job {b} \(queue b below its share: 0\.\d\d < 0\.50\); requeued",
                        t["reason"]) for t in victims), victims
    assert "Preempted by job" in tcl(cluster.address, "status", a).stdout
    metrics = urllib.request.urlopen(cluster.http + "/metrics", timeout=10).read().decode()
    assert 'tcluster_preemptions_total{preemptor_queue="b",victim_queue="a"} 2.0' in metrics
    assert re.search(r"^tcluster_preempted_cpu_seconds_total \d", metrics, re.M)
    marks = json.load(urllib.request.urlopen(cluster.http + "/api/v1/queues/usage", timeout=10))["preemptions"]
    assert [(m["victim_queue"], m["preemptor_queue"], m["by_job"]) for m in marks] == [("a", "b", b)] * 2
    job_marks = json.load(urllib.request.urlopen(f"{cluster.http}/api/v1/jobs/{a}/usage", timeout=10))["preemptions"]
    assert sorted(m["task"] for m in job_marks) == sorted(t["index"] for t in victims)
    tcl(cluster.address, "cancel", b)                          # room again: the victims start their attempt 2
    job = wait_until(lambda: running(tcl_json(cluster.address, "status", a)) == 4, 30)  # type: ignore[arg-type]
    for t in victims:
        out = tcl(cluster.address, "logs", a, "--task", str(t["index"])).stdout
        assert f"preempted=1 attempt=2 index={t['index']}" in out


@pytest.mark.parametrize("cluster", [{"queues": "queues:\n  a: {weight: 1, preemptable: false}\n  b: {weight: 1}\n"}],
                         indirect=True)
def test_a_protected_queue_is_never_touched_and_why_says_so(cluster: Cluster) -> None:
    a = cluster.submit("a", 4, "sleep", "600")
    wait_until(lambda: running(wait_job(cluster.address, a, {"RUNNING"})) == 4, 30)
    time.sleep(1.2)
    b = cluster.submit("b", 1, "sleep", "600")
    wait_until(lambda: "preemptable: false" in tcl_json(cluster.address, "status", b)["pending_reason"],  # type: ignore[index]
               AFTER_S + 15)
    time.sleep(GRACE_S + 1)
    assert cluster.shares() == {"a": 1.0, "b": 0.0}
    assert all(t["preemptions"] == 0 for t in tcl_json(cluster.address, "status", a)["tasks"])  # type: ignore[index]
    why = tcl(cluster.address, "why", b).stdout
    assert "queue b below its share (0.00 < 0.25)" in why and "preemptable: false" in why   # target: one task


def test_on_preempt_cancel_cancels_the_victims_job(cluster: Cluster) -> None:
    a = cluster.submit("a", 4, "sleep", "600", extra=("--on-preempt", "cancel"))
    wait_until(lambda: running(wait_job(cluster.address, a, {"RUNNING"})) == 4, 30)
    time.sleep(1.2)
    b = cluster.submit("b", 1, "sleep", "600")
    job = wait_job(cluster.address, a, {"CANCELLED"}, timeout_s=AFTER_S + GRACE_S + 20)
    assert any("the job asked --on-preempt cancel" in t["reason"] for t in job["tasks"])
    # The job is RUNNING once its task is placed (STARTING); wait for the task itself.
    wait_until(lambda: running(tcl_json(cluster.address, "status", b)) == 1, 30)  # type: ignore[arg-type]


@pytest.mark.parametrize("cluster", [{"grace_s": 8.0}], indirect=True)
def test_a_master_killed_mid_preemption_keeps_the_kill_and_preempts_once(cluster: Cluster) -> None:
    stubborn = ("sh", "-c", "trap '' TERM; sleep 600")          # dies only at SIGKILL, after the grace
    a = cluster.submit("a", 4, *stubborn)
    wait_until(lambda: running(wait_job(cluster.address, a, {"RUNNING"})) == 4, 30)
    time.sleep(1.2)
    b = cluster.submit("b", 2, "sleep", "600")
    cluster.master.wait_for_output(r"preempting .*for job " + b, timeout_s=AFTER_S + 15)
    cluster.restart_master()                                    # the victims are in their 8 s grace
    took = wait_until(lambda: running(tcl_json(cluster.address, "status", b)) == 2, 40)  # type: ignore[arg-type]
    print(f"\nb running 2 tasks {took:.1f}s after the master restart (grace 8s)")
    time.sleep(AFTER_S + 2)
    job = tcl_json(cluster.address, "status", a)
    assert sum(t["preemptions"] for t in job["tasks"]) == 2      # type: ignore[index]
    assert sorted(t["state"] for t in job["tasks"]) == ["PENDING", "PENDING", "RUNNING", "RUNNING"]  # type: ignore[index]
    assert cluster.shares() == {"a": 0.5, "b": 0.5}
