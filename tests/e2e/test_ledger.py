"""The usage ledger through the real binaries on real cgroups (README, "Usage ledger"):
tasks burn CPU, the master is killed (SIGKILL) while they run and their ends reach it only
after it restarts; `tcl report` then sums exactly the CPU time the tasks' final usage
shows (each attempt once), `tcl history` lists each attempt, and another restart changes
nothing."""

from __future__ import annotations

import csv
import io
import signal
import time
from pathlib import Path

import pytest

from testkit.procs import BIN, OneNodeCluster, Proc, cgroup_v1_usable, tcl, tcl_json, wait_job, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}
BURN = "end=$(($(date +%s)+2)); while [ $(date +%s) -lt $end ]; do :; done; sleep 2"


@pytest.fixture
def cluster(tmp_path: Path):  # type: ignore[no-untyped-def]
    c = OneNodeCluster(tmp_path, "ledger", ["--heartbeat-interval-s", "0.5"], "--cpus", "2", "--memory", "2Gi")
    try:
        yield c
    finally:
        c.stop()


def _down_while_tasks_end(c: OneNodeCluster, seconds: float) -> None:
    """kill -9 the master, wait (the tasks end meanwhile), start it on the same address and data."""
    c.master.stop(signal.SIGKILL)
    time.sleep(seconds)
    c.restarts += 1
    c.master = Proc([str(BIN / "tcl-master"), "--listen", c.address, *c.flags], c.tmp / f"master{c.restarts + 1}.log")
    c.master.wait_for_output(r"listening on")


def _report(c: OneNodeCluster, by: str) -> dict[str, dict]:
    reply = tcl_json(c.address, "report", "--since", "now-1hour", "--until", "now+1hour", "--by", by)
    assert isinstance(reply, dict)
    return {line[by]: line for line in reply["lines"]}


def test_tcl_report_matches_the_tasks_usage_across_master_restarts(cluster: OneNodeCluster) -> None:
    c = cluster
    burn = tcl(c.address, "submit", "--tasks", "2", "--cpu", "1", "--mem", "32Mi", "--", "sh", "-c", BURN).stdout.strip()
    wait_until(lambda: all(t["state"] == "RUNNING" for t in tcl_json(c.address, "status", burn)["tasks"]), 60)
    _down_while_tasks_end(c, 6.0)
    job = wait_job(c.address, burn, DONE, timeout_s=120)
    failing = tcl(c.address, "submit", "--mem", "16Mi", "--", "false").stdout.strip()
    wait_job(c.address, failing, DONE, timeout_s=60)
    used = sum(t["usage"]["cpu_seconds"] for t in job["tasks"])
    assert used > 0.1, job["tasks"]    # they burned CPU (a loaded machine gives them less than 2 s each)

    for restart in (False, True):
        if restart:
            c.restart_master()
        wait_until(lambda: failing in _report(c, "job"), 30)
        by_job = _report(c, "job")
        assert by_job[burn]["attempts"] == 2 and by_job[burn]["jobs"] == 1 and by_job[burn]["failures"] == 0
        assert by_job[burn]["cpu_hours"] * 3600 == pytest.approx(used, rel=1e-6)
        assert by_job[failing]["failures"] == 1
        [mine] = _report(c, "user").values()
        assert (mine["attempts"], mine["jobs"], mine["failures"]) == (3, 2, 1)
        rows = list(csv.DictReader(io.StringIO(tcl(c.address, "history", "--since", "now-1hour", "-o", "csv").stdout)))
        assert sorted((r["task"], r["state"], r["exit"]) for r in rows) == sorted(
            [(f"{burn}.0", "SUCCEEDED", "0"), (f"{burn}.1", "SUCCEEDED", "0"), (f"{failing}.0", "FAILED", "1")])
        table = tcl(c.address, "report", "--since", "now-1hour", "--by", "queue").stdout
        assert "default" in table and "CPU-H" in table
