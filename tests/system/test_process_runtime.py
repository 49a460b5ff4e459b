"""The process backend (no isolation): real processes through the shim; runs anywhere."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from tcluster.agent.runtime.base import LaunchError, TaskSpec
from tcluster.agent.runtime.process import ProcessRuntime, session_members
from tcluster.domain.resources import Resources
from testkit.cgroups import wait_exit

pytestmark = pytest.mark.system


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ProcessRuntime]:
    rt = ProcessRuntime(tmp_path / "state")
    rt.setup()
    pids: list[int] = []
    try:
        yield rt
    finally:
        for key in rt.containers():
            pid = rt.task_pid(key)
            rt.remove(key)
            if pid is not None:
                pids.append(pid)
        rt.close()
        assert all(not session_members(pid) for pid in pids)
        assert rt.containers() == []


def task(tmp_path: Path, key: str, command: tuple[str, ...], **kw: object) -> TaskSpec:
    return TaskSpec(key=key, task_id=key, attempt=0, command=command, resources=Resources(1.0, 0),
                    stdout_path=str(tmp_path / f"{key}.out"), stderr_path=str(tmp_path / f"{key}.err"),
                    **kw)  # type: ignore[arg-type]


def test_exit_code_signal_and_logs(runtime: ProcessRuntime, tmp_path: Path) -> None:
    wait_exit(runtime.start(task(tmp_path, "a.0", ("sh", "-c", "echo hello; exit 3"))))
    assert runtime.exit_status("a.0").exit_code == 3
    assert (tmp_path / "a.0.out").read_text() == "hello\n"
    wait_exit(runtime.start(task(tmp_path, "b.0", ("sh", "-c", "kill -TERM $$"))))
    status = runtime.exit_status("b.0")
    assert (status.exit_code, status.signal, status.oom_killed) == (None, 15, False)


def test_launch_errors(runtime: ProcessRuntime, tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="exec failed: No such file or directory"):
        runtime.start(task(tmp_path, "c.0", ("no-such-program-tcl",)))
    with pytest.raises(LaunchError, match="user 'no-such-user-tcl' does not exist"):
        runtime.start(task(tmp_path, "d.0", ("true",), user="no-such-user-tcl"))
    with pytest.raises(LaunchError, match="container key"):
        runtime.start(task(tmp_path, "../e", ("true",)))
    assert runtime.containers() == []


def test_sample_measures_the_session(runtime: ProcessRuntime, tmp_path: Path) -> None:
    loop = "import time\nwhile time.process_time() < 3: pass"
    started = runtime.start(task(tmp_path, "f.0", (sys.executable, "-c", loop)))
    deadline = time.monotonic() + 20
    usage = runtime.sample("f.0")
    while usage is not None and usage.cpu_ns <= 0.5e9 and time.monotonic() < deadline:
        time.sleep(0.1)
        usage = runtime.sample("f.0")
    assert usage is not None and usage.cpu_ns > 0.5e9 and usage.memory_bytes > 0 and usage.pids >= 1
    runtime.remove("f.0")
    wait_exit(started)
    assert runtime.sample("f.0") is None


def test_remove_kills_forked_children(runtime: ProcessRuntime, tmp_path: Path) -> None:
    started = runtime.start(task(tmp_path, "g.0", ("sh", "-c", "sleep 100 & sleep 100")))
    sid = runtime.task_pid("g.0")
    assert sid is not None
    deadline = time.monotonic() + 10
    while len(session_members(sid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    members = [p.pid for p in session_members(sid)]
    assert len(members) == 3
    runtime.remove("g.0")
    wait_exit(started)
    assert not session_members(sid)
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                   for p in members)
    runtime.remove("g.0")                      # idempotent
    assert runtime.containers() == []


def test_signal_reaches_the_task(runtime: ProcessRuntime, tmp_path: Path) -> None:
    started = runtime.start(task(tmp_path, "h.0", ("sleep", "100")))
    runtime.signal("h.0", 15)
    wait_exit(started)
    assert runtime.exit_status("h.0").signal == 15


def test_duplicate_key_is_refused(runtime: ProcessRuntime, tmp_path: Path) -> None:
    started = runtime.start(task(tmp_path, "dup.0", ("sleep", "100")))
    with pytest.raises(LaunchError, match="already exists"):
        runtime.start(task(tmp_path, "dup.0", ("true",)))
    runtime.remove("dup.0")
    wait_exit(started)


def test_supervisor_death_without_a_record_is_reported(runtime: ProcessRuntime, tmp_path: Path) -> None:
    started = runtime.start(task(tmp_path, "shim.0", ("sleep", "100")))
    os.kill(started.pid, 9)                     # the shim we started, not the task
    wait_exit(started)
    status = runtime.exit_status("shim.0")
    assert status.exit_code is None and "without recording" in status.reason and "-9" in status.reason
    sid = runtime.task_pid("shim.0")
    assert sid is not None and session_members(sid)
    runtime.remove("shim.0")                    # the orphaned task goes too
    assert not session_members(sid)
