"""The README flow through the real binaries: `tcl dev`, then a master with agents,
real cgroup v1 containers on this host, and a master restart in the middle of a job."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest

from testkit.procs import (BIN, Proc, cgroup_v1_usable, gated, leaked_cgroups, start_agent, start_master, tcl, tcl_json,
                           wait_job)

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}


def _node(tag: str) -> str:
    return f"e2e-{tag}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _start_agent(tmp: Path, master: str, node: str, *extra: str) -> Proc:
    return start_agent(tmp, master, node, "--runtime", "cgroup1", *extra)


def _start_agents(tmp: Path, address: str, nodes: list[str], into: list[Proc], memory: str) -> None:
    """One 1-core agent per node, each appended to `into` once registered (the caller stops them)."""
    for node in nodes:
        into.append(_start_agent(tmp, address, node, "--cpus", "1", "--memory", memory))


def _stop(*procs: Proc) -> None:
    for proc in procs[::-1]:
        proc.stop()


def test_dev_mode_runs_the_readme_job_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    node = _node("dev")
    dev = Proc([str(BIN / "tcl"), "dev", "--data-dir", str(tmp_path / ".tcluster"), "--listen", "127.0.0.1:0",
                "--node", node, "--runtime", "cgroup1"], tmp_path / "dev.log")
    try:
        master = "127.0.0.1:" + dev.wait_for_output(r"master on 127\.0\.0\.1:(\d+)").group(1)
        assert "tcl submit" in dev.output()
        job_id = tcl(master, "submit", "--cpu", "0.5", "--mem", "256Mi", "--", "python3", "-c", "print(42)").stdout.strip()
        job = wait_job(master, job_id, DONE)
        assert job["state"] == "SUCCEEDED"
        task = job["tasks"][0]
        assert task["node"] == node and task["exit_code"] == 0 and task["signal"] == 0
        assert task["usage"]["cpu_seconds"] > 0 and task["usage"]["memory_peak_bytes"] > 0
        human = tcl(master, "status", job_id).stdout
        assert "SUCCEEDED" in human and node in human
        assert tcl(master, "logs", job_id).stdout == "42\n"
        sleeper = tcl(master, "submit", "--cpu", "0.1", "--mem", "64Mi", "--", "sleep", "300").stdout.strip()
        wait_job(master, sleeper, {"RUNNING"})
        assert leaked_cgroups(node), "a running task has a cgroup"
    finally:
        code = dev.stop(signal.SIGINT)
    assert code == 0, dev.output()
    assert leaked_cgroups(node) == []
    assert (tmp_path / ".tcluster" / "master.db").exists()


def test_master_with_agents_runs_jobs_and_keeps_them_across_a_restart(tmp_path: Path, gates: Path) -> None:
    master, address = start_master(tmp_path)
    nodes = [_node(f"a{i}") for i in range(2)]
    agents: list[Proc] = []
    try:
        _start_agents(tmp_path, address, nodes, agents, "1Gi")
        listed = tcl_json(address, "nodes")
        assert sorted(n["name"] for n in listed) == sorted(nodes)
        assert all(n["state"] == "READY" and n["capacity"]["cpu"] == 1 for n in listed)
        job_id = tcl(address, "submit", "--cpu", "0.5", "--mem", "256Mi", "--", "python3", "-c", "print(42)").stdout.strip()
        assert wait_job(address, job_id, DONE)["state"] == "SUCCEEDED"
        assert tcl(address, "logs", job_id).stdout == "42\n"
        # A job that outlives the master: kill -9 the master mid-run, start it again. Its tasks
        # wait for a gate the test opens after the restart (a fixed sleep could end before a
        # loaded host's first poll saw them RUNNING).
        gate = gates / "gate"
        long_id = tcl(address, "submit", "--tasks", "2", "--cpu", "1", "--mem", "64Mi", "--",
                      *gated(gate, "echo done")).stdout.strip()
        job = wait_job(address, long_id, {"RUNNING"})
        assert sorted(t["node"] for t in job["tasks"]) == sorted(nodes)
        master.stop(signal.SIGKILL)
        master = Proc([str(BIN / "tcl-master"), "--listen", address, "--data-dir", str(tmp_path / "master"),
                       "--heartbeat-interval-s", "0.5"], tmp_path / "master2.log")
        master.wait_for_output(r"listening on")
        gate.touch()
        job = wait_job(address, long_id, DONE)
        assert job["state"] == "SUCCEEDED", job
        assert [t["exit_code"] for t in job["tasks"]] == [0, 0]
        assert tcl(address, "logs", long_id, "--task", "1").stdout == "done\n"
        assert tcl_json(address, "status", job_id)["state"] == "SUCCEEDED"   # kept across the restart
    finally:
        _stop(master, *agents)
    assert [n for n in nodes if leaked_cgroups(n)] == []


def test_five_agents_side_by_side_on_one_host(tmp_path: Path) -> None:
    master, address = start_master(tmp_path)
    nodes = [_node(f"f{i}") for i in range(5)]
    agents: list[Proc] = []
    try:
        _start_agents(tmp_path, address, nodes, agents, "512Mi")
        job_id = tcl(address, "submit", "--tasks", "5", "--cpu", "1", "--mem", "64Mi", "--",
                     "sh", "-c", "cat /proc/self/cgroup").stdout.strip()
        job = wait_job(address, job_id, DONE)
        assert job["state"] == "SUCCEEDED"
        assert sorted(t["node"] for t in job["tasks"]) == sorted(nodes)   # one per node: each has 1 cpu
        for task in job["tasks"]:
            log = tcl(address, "logs", job_id, "--task", str(task["index"])).stdout
            assert f"tcluster/{task['node']}/{task['id']}" in log   # ran inside its own node's subtree
        refused = tcl(address, "submit", "--cpu", "2", "--", "true", check=False)
        assert refused.returncode == 1 and "cpu" in refused.stderr
    finally:
        _stop(master, *agents)
    assert [n for n in nodes if leaked_cgroups(n)] == []
