"""The cgroup v2 backend against a fake cgroupfs in a temporary directory (this host has
no usable cgroup2; tests/vm runs the real thing). A fake mkdir fills in the interface files
the kernel would; the task runs for real through the shim, just in no cgroup."""

from __future__ import annotations

import errno
import os
import select
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest

from tcluster.agent.runtime import cgroup2
from tcluster.agent.runtime.base import LaunchError, RuntimeSetupError, TaskSpec
from tcluster.agent.runtime.cgroup2 import Cgroup2Runtime
from tcluster.agent.runtime.detect import CgroupMounts
from tcluster.domain.resources import Resources

MI = 2**20
WRITABLE = ("cgroup.subtree_control", "cgroup.procs", "cgroup.kill", "cgroup.freeze", "cpu.weight",
            "cpu.max", "memory.max", "memory.swap.max", "pids.max")


def fake_mkdir(path: Path) -> None:
    path.mkdir()
    for name in WRITABLE:
        (path / name).write_text("")
    (path / "cgroup.controllers").write_text("cpu memory pids\n")
    (path / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    (path / "cpu.stat").write_text("usage_usec 0\nuser_usec 0\nsystem_usec 0\n")


@pytest.fixture
def fake_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(cgroup2, "_new_cgroup", fake_mkdir)
    monkeypatch.setattr(cgroup2, "_remove_cgroup", shutil.rmtree)
    root = tmp_path / "cg"
    fake_mkdir(root)
    return root


@pytest.fixture
def runtime(fake_root: Path, tmp_path: Path) -> Iterator[Cgroup2Runtime]:
    rt = Cgroup2Runtime("tcluster/n1", tmp_path / "state", CgroupMounts(v2=str(fake_root)))
    rt.setup()
    yield rt
    for key in rt.containers():
        rt.remove(key)
    rt.close()


def task(tmp_path: Path, key: str, command: tuple[str, ...], **kw: object) -> TaskSpec:
    return TaskSpec(key=key, task_id=key, attempt=0, command=command, resources=Resources(0.5, 64 * MI),
                    stdout_path=str(tmp_path / f"{key}.out"), stderr_path=str(tmp_path / f"{key}.err"),
                    **kw)  # type: ignore[arg-type]


def wait_exit(fd: int) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    try:
        assert poller.poll(20_000), "task did not end within 20 s"
    finally:
        poller.unregister(fd)
        os.close(fd)            # Started.exit_fd belongs to the caller


def test_setup_enables_controllers_down_the_subtree(runtime: Cgroup2Runtime, fake_root: Path) -> None:
    for group in (fake_root, fake_root / "tcluster", fake_root / "tcluster" / "n1"):
        assert (group / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"


def test_start_writes_limits_enters_group_and_records_exit(runtime: Cgroup2Runtime, fake_root: Path,
                                                           tmp_path: Path) -> None:
    started = runtime.start(task(tmp_path, "a.0", ("sh", "-c", "echo hi; exit 3"), cpu_limit=1.0))
    wait_exit(started.exit_fd)
    started_exit = runtime.exit_status("a.0")
    group = fake_root / "tcluster" / "n1" / "a.0"
    assert {n: (group / n).read_text() for n in ("cpu.weight", "cpu.max", "memory.max", "memory.swap.max",
                                                 "pids.max")} == \
        {"cpu.weight": "50", "cpu.max": "100000 100000", "memory.max": str(64 * MI),
         "memory.swap.max": "0", "pids.max": "4096"}
    spec = (tmp_path / "state" / "containers" / "a.0" / "shim.spec").read_bytes().split(b"\0")
    assert spec[spec.index(b"procs") + 1].decode() == str(group / "cgroup.procs")
    assert (group / "cgroup.procs").read_text() == "0"       # the child wrote itself in
    assert (started_exit.exit_code, started_exit.oom_killed) == (3, False)
    assert (tmp_path / "a.0.out").read_text() == "hi\n"
    assert runtime.containers() == ["a.0"]
    runtime.remove("a.0")
    runtime.remove("a.0")                                    # idempotent
    assert runtime.containers() == [] and not group.exists()
    assert not (tmp_path / "state" / "containers" / "a.0").exists()


def test_sample_and_oom(runtime: Cgroup2Runtime, fake_root: Path, tmp_path: Path) -> None:
    started = runtime.start(task(tmp_path, "b.0", ("sh", "-c", "kill -KILL $$")))
    wait_exit(started.exit_fd)
    group = fake_root / "tcluster" / "n1" / "b.0"
    (group / "cpu.stat").write_text("usage_usec 2000\nuser_usec 1500\nsystem_usec 500\n")
    (group / "memory.current").write_text("4096\n")
    (group / "memory.events").write_text("oom 1\noom_kill 1\n")
    usage = runtime.sample("b.0")
    assert usage is not None and (usage.cpu_ns, usage.memory_bytes, usage.oom_kills) == (2_000_000, 4096, 1)
    status = runtime.exit_status("b.0")
    assert (status.exit_code, status.signal, status.oom_killed, status.reason) == (None, 9, True, "OOMKilled")
    assert runtime.sample("nope.0") is None and runtime.sample("../x") is None


def test_refused_limit_is_a_launch_error_and_leaves_nothing(runtime: Cgroup2Runtime, fake_root: Path,
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_memory_max(path: Path) -> None:
        fake_mkdir(path)
        (path / "memory.max").unlink()
    monkeypatch.setattr(cgroup2, "_new_cgroup", no_memory_max)
    with pytest.raises(LaunchError, match=r"memory\.max"):
        runtime.start(task(tmp_path, "c.0", ("true",)))
    assert runtime.containers() == []


def test_exec_failure_is_a_launch_error(runtime: Cgroup2Runtime, tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="exec failed: No such file or directory"):
        runtime.start(task(tmp_path, "d.0", ("no-such-program-tcl",)))
    assert runtime.containers() == []


def test_setup_explains_busy_subtree_control(fake_root: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def busy(path: Path, value: str) -> None:
        raise OSError(errno.EBUSY, "Device or resource busy")
    monkeypatch.setattr(cgroup2, "write_file", busy)
    rt = Cgroup2Runtime("tcluster/n2", tmp_path / "state", CgroupMounts(v2=str(fake_root)))
    with pytest.raises(RuntimeSetupError, match="holds processes"):
        rt.setup()


def test_check_names_missing_controllers(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("hugetlb\n")
    rt = Cgroup2Runtime("tcluster/n3", tmp_path / "state", CgroupMounts(v2=str(root)))
    with pytest.raises(RuntimeSetupError, match="lacks the cpu, memory, pids"):
        rt.check()


class FakeScope:
    """TaskScope without systemd: ensure() makes the scope's group as systemd would."""

    def __init__(self, root: Path) -> None:
        self.group = root / "tcluster.slice" / "tcl-tasks-n1.scope"
        self.ensured = 0
        self.lock = threading.Lock()

    def tools(self) -> tuple[str, str]:
        return "/usr/bin/systemd-run", "/bin/sleep"

    def ensure(self) -> str:
        with self.lock:
            self.ensured += 1
            if self.group.is_dir():
                return "adopted"
            self.group.parent.mkdir(exist_ok=True)
            fake_mkdir(self.group)
            time.sleep(0.05)        # systemd-run takes a while: a second launch would come meanwhile
            return "created"


def test_the_scope_holds_the_tasks_and_a_stopped_one_is_made_again_once(fake_root: Path, tmp_path: Path) -> None:
    scope = FakeScope(fake_root)
    rt = Cgroup2Runtime("tcluster.slice/tcl-tasks-n1.scope/tasks", tmp_path / "state", CgroupMounts(v2=str(fake_root)),
                        scope=scope)  # type: ignore[arg-type]
    rt.setup()
    assert scope.ensured == 1
    for group in (scope.group, scope.group / "tasks"):       # ours from the scope down; systemd's above it
        assert (group / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (fake_root / "cgroup.subtree_control").read_text() == ""
    shutil.rmtree(scope.group)                                 # `systemctl stop tcl-tasks-n1.scope`
    keys = [f"t{i}.0" for i in range(4)]
    with ThreadPoolExecutor(4) as pool:                        # launches run in threads
        started = list(pool.map(lambda key: rt.start(task(tmp_path, key, ("true",))), keys))
    for s in started:
        wait_exit(s.exit_fd)
    assert scope.ensured == 2 and sorted(rt.containers()) == keys
    for key in keys:
        rt.remove(key)
    rt.close()
