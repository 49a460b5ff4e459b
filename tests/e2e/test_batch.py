"""Batch work through the real binaries on real cgroups (README, "Batch work"): a
1,000-index array with %20, a three-job pipeline (and its failure cascade), two gangs each
needing 60% of the cluster, and a time limit; each with the master killed (SIGKILL) and
restarted mid-way."""

from __future__ import annotations

import os
import shutil
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from testkit.procs import (
    OneNodeCluster, cgroup_v1_usable, tcl, tcl_json, wait_job, wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}


class Cluster(OneNodeCluster):
    def __init__(self, tmp: Path, cpus: int) -> None:
        super().__init__(tmp, "batch", ["--heartbeat-interval-s", "0.5", "--reserve-after-s", "1"],
                         "--cpus", str(cpus), "--memory", "4Gi")

    def submit(self, *args: str) -> str:
        return tcl(self.address, "submit", "--mem", "16Mi", *args).stdout.strip()

    def status(self, job_id: str) -> dict:
        return tcl_json(self.address, "status", job_id)   # type: ignore[return-value]


def seconds(stamp: str | None) -> float:
    return datetime.fromisoformat(stamp).timestamp() if stamp else 0.0


def most_at_once(tasks: list[dict]) -> int:
    """The most tasks whose [started, finished] intervals overlap."""
    edges = sorted([(seconds(t["started_at"]), 1) for t in tasks] + [(seconds(t["finished_at"]), -1) for t in tasks])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    c = Cluster(tmp_path, getattr(request, "param", 4))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def runs_dir():  # type: ignore[no-untyped-def]
    """Outside /tmp (tasks get a private /tmp): each run of a task appends its index here."""
    path = Path("/var/tmp") / f"tcl-e2e-batch-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    path.mkdir()
    path.chmod(0o777)          # tasks run as the agent's default user, not root
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("cluster", [40], indirect=True)
def test_a_thousand_index_array_with_a_throttle_of_20(cluster: Cluster, runs_dir: Path) -> None:
    job_id = cluster.submit("--array", "0-999%20", "--cpu", "0.1", "--",
                            "sh", "-c", 'test "$TCL_TASK_INDEX" = "$TCL_ARRAY_TASK_ID" && test "$TCL_TASK_COUNT" = 1000 '
                                        f'&& echo "$TCL_ARRAY_TASK_ID" >> {runs_dir}/runs && sleep 0.05')
    wait_until(lambda: len(cluster.status(job_id)["tasks"]) >= 200, 120)
    status = tcl(cluster.address, "status", job_id).stdout
    assert "at most 20 at once; waiting [" in status
    cluster.restart_master()
    job = wait_job(cluster.address, job_id, DONE, timeout_s=400)
    assert job["state"] == "SUCCEEDED", job["pending_reason"]
    tasks = job["tasks"]
    assert sorted(t["index"] for t in tasks) == list(range(1000))            # each index has its task
    assert all(t["exit_code"] == 0 for t in tasks)
    runs = sorted(int(line) for line in (runs_dir / "runs").read_text().split())
    assert runs == list(range(1000))                                          # ... and ran exactly once
    assert tcl(cluster.address, "logs", job_id, "--task", "999").returncode == 0   # addressed by its index
    assert "no task 1000" in tcl(cluster.address, "logs", job_id, "--task", "1000", check=False).stderr
    assert most_at_once(tasks) <= 20
    print(f"\n1000-index array: at most {most_at_once(tasks)} at once; "
          f"{seconds(max(t['finished_at'] for t in tasks)) - seconds(min(t['started_at'] for t in tasks)):.1f}s "
          f"from first start to last end, master SIGKILLed once")


def test_a_pipeline_runs_in_order_and_a_failure_cancels_the_rest(cluster: Cluster, runs_dir: Path) -> None:
    def until(name: str) -> str:      # a task that runs until the test lets it end
        return f"while [ ! -e {runs_dir}/{name} ]; do sleep 0.1; done"

    first = cluster.submit("--cpu", "0.1", "--", "sh", "-c", until("go"))
    second = cluster.submit("--cpu", "0.1", "--after-ok", first, "--", "true")
    third = cluster.submit("--cpu", "0.1", "--dependency", f"afterok:{second}", "--", "true")
    assert "waiting for dependency" in cluster.status(third)["pending_reason"]
    cluster.restart_master()
    (runs_dir / "go").touch()
    jobs = [wait_job(cluster.address, j, DONE, timeout_s=60) for j in (first, second, third)]
    assert [j["state"] for j in jobs] == ["SUCCEEDED"] * 3
    ends = [seconds(j["tasks"][0]["finished_at"]) for j in jobs]
    starts = [seconds(j["tasks"][0]["started_at"]) for j in jobs]
    assert starts[1] >= ends[0] and starts[2] >= ends[1]

    bad = cluster.submit("--cpu", "0.1", "--", "sh", "-c", until("fail") + "; exit 3")
    after = cluster.submit("--cpu", "0.1", "--after-ok", bad, "--", "true")
    last = cluster.submit("--cpu", "0.1", "--after-ok", after, "--", "true")
    cluster.restart_master()
    (runs_dir / "fail").touch()
    assert wait_job(cluster.address, bad, DONE)["state"] == "FAILED"
    cancelled = [wait_job(cluster.address, j, DONE) for j in (after, last)]
    assert [j["state"] for j in cancelled] == ["CANCELLED", "CANCELLED"]
    assert cancelled[0]["reason"] == f"cancelled: dependency can no longer be met: afterok:{bad} (FAILED)"
    assert cancelled[1]["reason"] == f"cancelled: dependency can no longer be met: afterok:{after} (CANCELLED)"
    assert all(t["started_at"] is None for j in cancelled for t in j["tasks"])


@pytest.mark.parametrize("cluster", [5], indirect=True)
def test_two_gangs_each_needing_sixty_percent_both_finish(cluster: Cluster) -> None:
    one = cluster.submit("--gang", "--tasks", "3", "--cpu", "1", "--", "sleep", "3")
    two = cluster.submit("--gang", "--tasks", "3", "--cpu", "1", "--", "sleep", "3")
    wait_until(lambda: cluster.status(one)["state"] == "RUNNING" or cluster.status(two)["state"] == "RUNNING", 30)
    cluster.restart_master()
    jobs = [wait_job(cluster.address, j, DONE, timeout_s=90) for j in (one, two)]
    assert [j["state"] for j in jobs] == ["SUCCEEDED", "SUCCEEDED"]
    for job in jobs:                                        # each gang started together
        started = [seconds(t["started_at"]) for t in job["tasks"]]
        assert max(started) - min(started) < 5   # one round launched them (a loaded host starts them slower)
    first, second = sorted(jobs, key=lambda j: seconds(j["tasks"][0]["started_at"]))
    assert min(seconds(t["started_at"]) for t in second["tasks"]) >= \
        max(seconds(t["finished_at"]) for t in first["tasks"]) - 0.5   # one after the other


def test_a_time_limit_ends_the_task_failed_timelimit(cluster: Cluster) -> None:
    job_id = cluster.submit("--cpu", "0.1", "--time-limit", "3s", "--", "sleep", "600")
    wait_until(lambda: cluster.status(job_id)["state"] == "RUNNING", 30)
    cluster.restart_master()
    job = wait_job(cluster.address, job_id, DONE, timeout_s=60)
    task = job["tasks"][0]
    assert (job["state"], task["state"], task["reason"]) == ("FAILED", "FAILED", "TimeLimit")
    ran = seconds(task["finished_at"]) - seconds(task["started_at"])
    assert 3.0 <= ran < 30, ran
    assert "Time limit:  3s" in tcl(cluster.address, "status", job_id).stdout or \
        "Time limit: 3s" in " ".join(tcl(cluster.address, "status", job_id).stdout.split())


def test_a_ten_million_index_array_cancelled_and_overlapping_runs_refused(cluster: Cluster) -> None:
    bad = tcl(cluster.address, "submit", "--mem", "16Mi", "--array", "0-100,5-6,50", "--", "true", check=False)
    assert bad.returncode == 2 and "runs must not overlap: '5-6' starts inside '0-100'" in bad.stderr, bad.stderr
    job_id = cluster.submit("--array", "0-9999999%2", "--cpu", "0.1", "--", "sleep", "300")
    wait_until(lambda: sum(t["state"] == "RUNNING" for t in cluster.status(job_id)["tasks"]) == 2, 60)
    stepped = tcl(cluster.address, "cancel", job_id, "--tasks", "0-99999999:2", check=False)
    assert stepped.returncode == 1 and "at most 100,000" in stepped.stderr, stepped.stderr
    tcl(cluster.address, "cancel", job_id, "--tasks", "0-99999999")        # answered at once: runs, not indexes
    job = wait_job(cluster.address, job_id, DONE, timeout_s=60)
    assert job["state"] == "CANCELLED", job
    assert sorted(t["index"] for t in job["tasks"]) == [0, 1]                # only the two that ran have rows
    assert all(t["state"] == "KILLED" for t in job["tasks"]), [(t["index"], t["state"], t["reason"]) for t in job["tasks"]]
