"""Backfill through the real binaries on real cgroups (README, "Backfill"): a gang's
reservation on a 2-core node is backfilled by a short time-limited job and not by a long
one; `tcl why` says which and why, also after the master was killed and restarted."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from testkit.procs import OneNodeCluster, cgroup_v1_usable, tcl, tcl_json, wait_job, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}


class Cluster(OneNodeCluster):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, "backfill", ["--heartbeat-interval-s", "0.5", "--reserve-after-s", "1"],
                         "--cpus", "2", "--memory", "4Gi")

    def submit(self, *args: str) -> str:
        return tcl(self.address, "submit", "--mem", "16Mi", "--cpu", "1", *args).stdout.strip()

    def state(self, job_id: str) -> str:
        return str(tcl_json(self.address, "status", job_id)["state"])   # type: ignore[index]

    def why(self, job_id: str) -> dict:
        return tcl_json(self.address, "why", job_id)   # type: ignore[return-value]


@pytest.fixture
def cluster(tmp_path: Path):  # type: ignore[no-untyped-def]
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def test_a_gangs_reservation_takes_a_short_job_and_not_a_long_one(cluster: Cluster) -> None:
    runner = cluster.submit("--time-limit", "10m", "--", "sleep", "600")     # 1 of 2 cores, ends by +10m
    wait_until(lambda: cluster.state(runner) == "RUNNING", 60)
    gang = cluster.submit("--gang", "--tasks", "2", "--", "sleep", "1")     # needs both cores: holds the node
    wait_until(lambda: "held for it" in cluster.why(gang)["pending_reason"], 60)

    short = cluster.submit("--time-limit", "5m", "--", "sleep", "300")      # ends before the runner's limit
    wait_until(lambda: cluster.state(short) == "RUNNING", 60)
    note = f"backfilled: ends before job {gang} needs the node"
    assert cluster.why(short)["backfilled"] == note
    assert f"started: {note}" in tcl(cluster.address, "why", short).stdout
    assert cluster.state(gang) == "PENDING"

    # The backfilled task's reason is state: it survives a kill -9 of the master. (The holds
    # are the round's memory: the gang's forms again reserve_after_s after the restart.)
    cluster.restart_master()
    assert cluster.why(short)["backfilled"] == note
    wait_until(lambda: "held for it" in cluster.why(gang)["pending_reason"], 60)

    long = cluster.submit("--time-limit", "1h", "--", "sleep", "1")         # would end after the estimate
    tcl(cluster.address, "cancel", short)                                   # a core is free again
    wait_until(lambda: f"would delay job {gang}" in cluster.why(long)["pending_reason"], 60)
    assert cluster.state(long) == "PENDING"
    assert "waits: " in tcl(cluster.address, "why", long).stdout

    tcl(cluster.address, "cancel", runner)
    gang_job = wait_job(cluster.address, gang, DONE, timeout_s=120)
    long_job = wait_job(cluster.address, long, DONE, timeout_s=120)
    assert gang_job["state"] == long_job["state"] == "SUCCEEDED"
    # The long job never started on the held room: only once the gang had started.
    assert first_start(long_job) >= first_start(gang_job)


def first_start(job: dict) -> float:
    return min(datetime.fromisoformat(t["started_at"]).timestamp() for t in job["tasks"])
