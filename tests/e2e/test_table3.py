"""TCluster's Table 3 through the real daemons: five agents on this host with Table 1's
capacities, Table 2's ten jobs as `sleep` commands in order, first-fit against ANBF."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from testkit.procs import BIN, Proc, cgroup_v1_usable, leaked_cgroups, tcl, tcl_json

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
MiB = 2**20
TABLE1 = [(3.8, 1847), (3.8, 1851), (3.8, 1858), (3.8, 1859), (3.8, 1855)]
TABLE2 = [(1.2, 1000), (2.5, 900), (2.5, 1200), (3.0, 800), (3.0, 1500),
          (0.7, 300), (1.0, 600), (1.7, 800), (1.1, 900), (0.5, 800)]


def _run_table2(tmp: Path, placement: str) -> tuple[list[str], dict[str, dict]]:
    """Returns the states of the ten jobs and `tcl nodes -o json` keyed by s1..s5."""
    tag = f"t3{placement[:2]}-{os.getpid()}-{uuid.uuid4().hex[:4]}"
    master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(tmp / tag),
                   "--placement", placement, "--fairness", "fifo"], tmp / f"{tag}-master.log")
    agents: list[Proc] = []
    try:
        address = "127.0.0.1:" + master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)").group(1)
        for i, (cpu, mem) in enumerate(TABLE1, 1):
            node = f"{tag}-s{i}"
            agents.append(Proc([str(BIN / "tcl-agent"), "--master", address, "--node", node, "--runtime", "cgroup1",
                                "--cpus", str(cpu), "--memory", f"{mem}Mi", "--reserve-cpus", "0",
                                "--reserve-memory", "0", "--state-dir", str(tmp / node)], tmp / f"{node}.log"))
            agents[-1].wait_for_output("registered with")
        ids = [tcl(address, "submit", "--cpu", str(cpu), "--mem", f"{mem}Mi", "--", "sleep", "120").stdout.strip()
               for cpu, mem in TABLE2]
        states = _settle(address, ids)
        nodes = {n["name"].rsplit("-", 1)[1]: n for n in tcl_json(address, "nodes")}  # type: ignore[union-attr]
        for job_id in ids:
            tcl(address, "cancel", job_id, check=False)
        return states, nodes
    finally:
        for agent in agents:
            agent.stop()
        master.stop()
        for i in range(1, 6):
            assert leaked_cgroups(f"{tag}-s{i}") == []


def _settle(address: str, ids: list[str]) -> list[str]:
    """Waits (bounded) until no job is still being started, then returns the states."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        jobs = {j["id"]: j for j in tcl_json(address, "jobs")}  # type: ignore[union-attr]
        tasks = [jobs[i]["tasks"][0] for i in ids]
        pending_have_reasons = all(jobs[i]["pending_reason"] for i in ids if jobs[i]["state"] == "PENDING")
        if all(t["state"] in ("RUNNING", "PENDING") for t in tasks) and pending_have_reasons:
            return [jobs[i]["state"] for i in ids]
        time.sleep(0.2)
    raise AssertionError(f"jobs did not settle: {[jobs[i]['state'] for i in ids]}")


def test_table3_first_fit_leaves_jobs_8_and_9_pending(tmp_path: Path) -> None:
    states, nodes = _run_table2(tmp_path, "first-fit")
    assert [n for n, s in enumerate(states, 1) if s == "PENDING"] == [8, 9]
    assert [round(nodes[f"s{i}"]["free"]["memory"] / MiB) for i in range(1, 6)] == [547, 351, 658, 259, 355]


def test_table3_anbf_runs_all_ten_with_the_papers_free_memory(tmp_path: Path) -> None:
    states, nodes = _run_table2(tmp_path, "anbf")
    assert states == ["RUNNING"] * 10
    assert [round(nodes[f"s{i}"]["free"]["memory"] / MiB) for i in range(1, 6)] == [47, 51, 258, 59, 55]
