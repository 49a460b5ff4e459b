"""Pure pieces of the node runtime: where v2 groups go (delegation), whom tasks run as,
the persistent outbox, the launch record, and what the shipped unit files promise."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tcluster.agent.outbox import Outbox
from tcluster.agent.launchrecord import load_record, save_record
from tcluster.agent.runas import task_user
from tcluster.domain.launch import Launch
from tcluster.agent.runtime.base import LaunchError, RawUsage, RuntimeSetupError
from tcluster.agent.runtime.detect import V2Layout, parse_proc_cgroup, plan_v2
from tcluster.agent.rates import to_task_usage
from tcluster.domain.model import JobSpec, TaskState, TaskUsage
from tcluster.domain.reports import TaskReport
from tcluster.domain.resources import Resources

UNITS = Path(__file__).resolve().parents[2] / "systemd"


@pytest.mark.parametrize("text,expected", [
    ("0::/system.slice/tcl-agent.service\n", "/system.slice/tcl-agent.service"),
    ("12:pids:/\n4:memory:/x\n0::/\n", "/"),
    ("4:memory:/process_api/abc\n1:name=systemd:/\n", None),       # pure v1: no unified line
    ("", None),
])
def test_parse_proc_cgroup(text: str, expected: str | None) -> None:
    assert parse_proc_cgroup(text) == expected


@pytest.mark.parametrize("parent,own,expected", [
    (None, "/system.slice/tcl-agent.service", V2Layout("tcluster/n1")),
    ("delegated", "/system.slice/tcl-agent.service",
     V2Layout("system.slice/tcl-agent.service/tasks", "system.slice/tcl-agent.service/agent")),
    ("delegated", "/system.slice/tcl-agent.service/agent",          # restarted inside its leaf
     V2Layout("system.slice/tcl-agent.service/tasks", "system.slice/tcl-agent.service/agent")),
    ("/agents/n1/", "/", V2Layout("agents/n1")),
])
def test_plan_v2(parent: str | None, own: str, expected: V2Layout) -> None:
    assert plan_v2("n1", parent, own) == expected


def test_plan_v2_delegated_needs_a_group_of_its_own() -> None:
    with pytest.raises(RuntimeSetupError, match="Delegate=yes"):
        plan_v2("n1", "delegated", "/")


def test_task_user_policy() -> None:
    assert task_user("", "nobody", False) == "nobody"
    assert task_user("65534", "nobody", False) == "65534"
    with pytest.raises(LaunchError, match="may not run as root.*--allow-root"):
        task_user("root", "nobody", False)
    with pytest.raises(LaunchError, match="may not run as root"):
        task_user("0", "nobody", False)
    assert task_user("root", "nobody", True) == "root"
    with pytest.raises(LaunchError, match="user 'no-such-user-tcl' does not exist on this node"):
        task_user("no-such-user-tcl", "nobody", True)


def test_launch_record_round_trips_privately(tmp_path: Path) -> None:
    spec = JobSpec(("sh", "-c", "x"), Resources(0.5, 64 << 20), env=(("A", "1"),), user="nobody", workdir="/srv",
                   cpu_limit=1.5, swap=-1, pids_max=64, retries=2, log_max_bytes=2**20)
    request = Launch("0123abcd.0", 2, "0123abcd", 0, spec)
    save_record(tmp_path, request)
    assert load_record(tmp_path) == request
    assert (tmp_path / "launch.json").stat().st_mode & 0o777 == 0o600   # it holds the task's environment
    assert load_record(tmp_path / "missing") is None


def test_a_launch_record_written_by_an_older_agent_still_loads(tmp_path: Path) -> None:
    # The keys agents have written since the first release: tasks survive an agent upgrade.
    (tmp_path / "launch.json").write_text(
        '{"task_id": "0123abcd.0", "attempt": 2, "job_id": "0123abcd", "index": 0, "spec": {"command": ["sleep", "9"], '
        '"resources": {"cpu": 0.5, "memory": 1048576}, "name": "", "queue": "default", "tasks": 1, "env": [["A", "1"]], '
        '"user": "", "workdir": "", "labels": [], "constraints": [], "weight": 1.0, "cpu_limit": 0.0, "swap": 0, '
        '"pids_max": 0, "retries": 0}}')
    loaded = load_record(tmp_path)
    assert loaded == Launch("0123abcd.0", 2, "0123abcd", 0, JobSpec(("sleep", "9"), Resources(0.5, 2**20), env=(("A", "1"),)))


def test_outbox_survives_a_restart_and_forgets_what_was_acked(tmp_path: Path) -> None:
    async def body() -> None:
        path = tmp_path / "outbox.jsonl"
        box = Outbox(path)
        usage = TaskUsage(cpu_seconds=1.5, oom_kills=1)
        box.add(TaskReport("j.0", 1, TaskState.RUNNING, at=1.0))
        box.add(TaskReport("j.0", 1, TaskState.FAILED, exit_code=None, signal=9, reason="OOMKilled", usage=usage))
        box.add(TaskReport("j.1", 1, TaskState.SUCCEEDED, exit_code=0))
        box.ack(1)
        again = Outbox(path)
        assert [s for s, _ in again.unacked()] == [2, 3]
        assert again.unacked()[0][1] == TaskReport("j.0", 1, TaskState.FAILED, None, 9, "OOMKilled", 0.0, usage)
        again.add(TaskReport("j.2", 1, TaskState.RUNNING))
        assert [s for s, _ in again.unacked()] == [2, 3, 4]       # numbering goes on
        with open(path, "a") as f:
            f.write('{"seq": 5, "rep')                             # torn by a crash mid-write
        assert [s for s, _ in Outbox(path).unacked()] == [2, 3, 4]
    asyncio.run(body())


def test_usage_splits_user_system_rates_and_carries_the_detail() -> None:
    before = RawUsage(at=10, cpu_ns=0, user_ns=0, system_ns=0)
    now = RawUsage(at=12, cpu_ns=3 * 10**9, user_ns=2 * 10**9, system_ns=10**9, throttled_ns=5 * 10**8,
                   nr_throttled=3, swap_bytes=4096, io_read_bytes=7, io_write_bytes=8, oom_kills=1,
                   pids_max_hits=2)
    u = to_task_usage(before, now, 0)
    assert (u.cpu_rate, u.cpu_user_rate, u.cpu_system_rate) == (1.5, 1.0, 0.5)
    assert (u.cpu_throttled_seconds, u.cpu_throttled_periods, u.memory_swap_bytes) == (0.5, 3, 4096)
    assert (u.io_read_bytes, u.io_write_bytes, u.oom_kills, u.pids_max_hits) == (7, 8, 1, 2)


def test_agent_unit_delegates_and_keeps_shims_alive() -> None:
    agent = (UNITS / "tcl-agent.service").read_text()
    assert "\nDelegate=yes\n" in agent and "\nKillMode=process\n" in agent
    assert "ExecStart=/opt/tcluster/bin/tcl-agent" in agent
    assert "ExecStart=/opt/tcluster/bin/tcl-master" in (UNITS / "tcl-master.service").read_text()
