"""Issue 36, finding 2: the fence holds without an agent. The shim of a re-runnable task
rereads the agent's lease (last_heard.json: boot id, CLOCK_BOOTTIME reading, fence_s) and
kills the task itself once it has run out, recording "fenced" in the exit record; a renewed
lease, another boot's or a zero fence_s never stops it."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from tcluster.agent.fence import LastHeard, boot_id, boot_now
from tcluster.agent.runtime.base import ExitStatus, TaskSpec
from tcluster.agent.runtime.cgfs import wait_until
from tcluster.agent.runtime.launch import ShimFiles, shim_spec
from tcluster.agent.taskstate import AgentTasks, Attempt, Exited, Phase, Report
from tcluster.domain.launch import Launch
from tcluster.domain.model import JobSpec, TaskState
from tcluster.domain.resources import Resources
from tests.unit.test_runtime_shim import exit_record, needs_root, run_shim, write_spec


def write_lease(path: Path, silent_s: float, fence_s: float, boot: str | None = None) -> None:
    path.write_text(json.dumps({"boot_id": boot_id() if boot is None else boot,
                                "at": boot_now() - silent_s, "fence_s": fence_s}))


@pytest.mark.parametrize("namespaces", [False, pytest.param(True, marks=needs_root)])
def test_an_expired_lease_kills_the_task_and_is_recorded(tmp_path: Path, namespaces: bool) -> None:
    lease = tmp_path / "last_heard.json"
    write_lease(lease, silent_s=30.0, fence_s=5.0)
    over = {"lease": str(lease)} | ({"ns": "1"} if namespaces else {})
    # Without the shim's fence this sleep outlives run_shim's timeout and the test fails.
    out, rc = run_shim(write_spec(tmp_path, ["sh", "-c", "sleep 60 & sleep 60"], **over))
    assert rc == 0 and out.startswith("started"), out
    record = exit_record(tmp_path)
    assert record["fenced"] is True and record["signal"] == 9 and record["silence_s"] >= 30.0, record


V1_PIDS = Path("/sys/fs/cgroup/pids")


@pytest.mark.skipif(os.geteuid() != 0 or not (V1_PIDS / "cgroup.procs").exists(),
                    reason="needs root and a cgroup v1 pids hierarchy")
def test_without_namespaces_the_fence_kills_a_setsid_child_in_the_tasks_cgroup(tmp_path: Path) -> None:
    """On v1 without namespaces (no cgroup.kill, no PID namespace) the fence killed only the
    task's process group: a child that called setsid() ran on. Now every pid of the cgroup."""
    group = V1_PIDS / f"tcl-test-fence-{os.getpid()}"
    group.mkdir()
    lease = tmp_path / "last_heard.json"
    write_lease(lease, silent_s=0.0, fence_s=1.0)          # runs out ~2 s after the start
    child = tmp_path / "child.pid"
    try:
        script = f"setsid sleep 60 & echo $! > {child}; sleep 60"
        out, rc = run_shim(write_spec(tmp_path, ["sh", "-c", script], lease=str(lease),
                                      procs=str(group / "cgroup.procs")))
        assert rc == 0 and out.startswith("started"), out
        assert exit_record(tmp_path)["fenced"] is True
        assert int(child.read_text()) > 0                   # the setsid'ed child had started
        assert wait_until(lambda: not (group / "cgroup.procs").read_text().strip(), 5.0), \
            f"left in the task's cgroup: {(group / 'cgroup.procs').read_text().split()}"
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            os.kill(int(pid), 9)
        wait_until(lambda: not (group / "cgroup.procs").read_text().strip(), 5.0)
        group.rmdir()


def renew_until(lease: Path, stop: threading.Event) -> None:
    while not stop.is_set():
        write_lease(lease, silent_s=0.0, fence_s=0.5)
        stop.wait(0.2)


@pytest.mark.parametrize("case", ["renewed", "other boot", "no fence", "no file"])
def test_a_live_or_meaningless_lease_never_stops_the_task(tmp_path: Path, case: str) -> None:
    lease = tmp_path / "last_heard.json"
    stop = threading.Event()
    renewer = threading.Thread(target=renew_until, args=(lease, stop), daemon=True)
    if case == "renewed":      # fence_s 0.5: the task's 2.5 s is several leases long
        renewer.start()
    elif case == "other boot":
        write_lease(lease, silent_s=30.0, fence_s=1.0, boot="another-boot")
    elif case == "no fence":
        write_lease(lease, silent_s=30.0, fence_s=0.0)
    try:
        out, rc = run_shim(write_spec(tmp_path, ["sh", "-c", "sleep 2.5"], lease=str(lease)))
    finally:
        stop.set()
    assert rc == 0 and out.startswith("started"), out
    record = exit_record(tmp_path)
    assert (record["exit_code"], record["signal"]) == (0, 0) and "fenced" not in record, record


def _spec(lease_path: str) -> TaskSpec:
    return TaskSpec(key="j.0.1", task_id="j.0", attempt=1, command=("true",), resources=Resources(),
                    stdout_path="/o", stderr_path="/e", namespaces=False, lease_path=lease_path)


def test_shim_spec_carries_the_lease_only_when_fenced(tmp_path: Path) -> None:
    files = ShimFiles(spec=tmp_path / "s", exit=tmp_path / "x", log=tmp_path / "l", cwd="/", tmp=None)
    with_lease = shim_spec(_spec("/state/last_heard.json"), None, files, [])
    assert b"lease\0/state/last_heard.json\0" in with_lease
    assert b"lease\0" not in shim_spec(_spec(""), None, files, [])


def test_the_agent_saves_its_fence_with_each_reading(tmp_path: Path) -> None:
    LastHeard(tmp_path).heard(12.5)
    saved = json.loads((tmp_path / "last_heard.json").read_text())
    assert saved["fence_s"] == 12.5 and saved["boot_id"] == boot_id() and saved["at"] <= boot_now()
    assert os.stat(tmp_path / "last_heard.json").st_mode & 0o077 == 0


def test_a_fenced_exit_is_reported_killed_with_the_shims_reason() -> None:
    """Re-adopted by a restarted agent (no kill of its own), the shim's fence is a KILLED
    attempt with the why, not a FAILED one 'killed by SIGKILL'."""
    tasks = AgentTasks(Resources(4, 2**30), Resources())
    launch = Launch("0123abcd.0", 1, "0123abcd", 0, JobSpec(("sleep", "9"), Resources(1, 2**20), retries=1))
    tasks.attempts = {launch.key: Attempt(launch, Phase.RUNNING)}
    status = ExitStatus(None, 9, 7.0, reason="cut off from the master for 12s; ...", fenced=True)
    report = tasks.handle(Exited(launch.key, status, None, 8.0))[0]
    assert isinstance(report, Report)
    assert (report.report.state, report.report.reason) == (TaskState.KILLED, status.reason)
