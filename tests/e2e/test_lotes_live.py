"""`tcl-master --placement lotes` through the real binaries (process runtime): the plan's
bins show in `tcl nodes`, tasks land where their class is wanted, `tcl status` shows the
class, and the agents' heartbeats bring the actual mixes up to the targets."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from testkit.procs import BIN, Proc, tcl, tcl_json, wait_job

pytestmark = pytest.mark.e2e
CLASSES = """classes:
  - {name: cpu-job, request: {cpu: 2, memory: 512Mi}, share: 0.5}
  - {name: mem-job, request: {cpu: 0.5, memory: 4Gi}, share: 0.5}
"""
NODES = {"a1": ("8", "2Gi"), "a2": ("8", "2Gi"), "b1": ("2", "16Gi"), "b2": ("2", "16Gi")}


def _until(check, timeout_s: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.2)


def test_live_lotes_places_by_bins_and_tcl_nodes_shows_target_and_actual(tmp_path: Path) -> None:
    (tmp_path / "classes.yaml").write_text(CLASSES)
    master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "master"),
                   "--placement", "lotes", "--lotes-classes", str(tmp_path / "classes.yaml"),
                   "--heartbeat-interval-s", "0.3"], tmp_path / "master.log")
    agents: list[Proc] = []
    jobs: list[str] = []
    address = ""
    try:
        address = "127.0.0.1:" + master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)").group(1)
        suffix = f"-{os.getpid()}"
        for node, (cpus, memory) in NODES.items():
            agents.append(Proc([str(BIN / "tcl-agent"), "--master", address, "--node", node + suffix,
                                "--runtime", "process", "--cpus", cpus, "--memory", memory,
                                "--state-dir", str(tmp_path / node), *(["--allow-root"] if os.geteuid() == 0 else [])],
                               tmp_path / f"{node}.log"))

        def planned() -> list | None:
            nodes = tcl_json(address, "nodes")
            assert isinstance(nodes, list)
            ok = len(nodes) == 4 and all(n["lotes"]["config"] and n["lotes"]["fallback"] is None for n in nodes)
            return nodes if ok else None
        nodes = _until(planned)
        targets = {n["name"][:2]: n["lotes"]["target"] for n in nodes}
        assert targets == {"a1": {"0": 4}, "a2": {"0": 4}, "b1": {"1": 4}, "b2": {"1": 4}}
        master.wait_for_output(r"lotes: solved in [0-9.]+s")

        for cpu, mem in (("0.5", "4Gi"), ("2", "512Mi")):    # mem-jobs first
            jobs.append(tcl(address, "submit", "--tasks", "8", "--cpu", cpu, "--mem", mem, "--", "sleep", "120")
                        .stdout.strip())
        mem_job, cpu_job = (wait_job(address, j, {"RUNNING"}) for j in jobs)
        assert sorted(t["node"][:2] for t in mem_job["tasks"]) == ["b1"] * 4 + ["b2"] * 4
        assert {t["lotes_class"] for t in cpu_job["tasks"]} == {0}

        def mixes_match() -> bool:
            nodes = tcl_json(address, "nodes")
            assert isinstance(nodes, list)
            return all(n["lotes"]["actual"] == n["lotes"]["target"] for n in nodes)
        _until(mixes_match)
        table = tcl(address, "nodes").stdout
        assert "TARGET" in table and "ACTUAL" in table and "c0:4    c0:4" in table
        assert "placement lotes: following the plan" in table and "c0=cpu-job c1=mem-job" in table
        assert "CLASS" in tcl(address, "status", jobs[1]).stdout
    finally:
        for job_id in jobs:
            tcl(address, "cancel", job_id, check=False)
        for job_id in jobs:
            try:
                wait_job(address, job_id, {"CANCELLED"}, timeout_s=30)
            except AssertionError:
                pass
        for agent in agents:
            agent.stop()
        master.stop()
