"""The cgroup v1 backend on this host's real hierarchies (root only). Every test uses its
own node name, and the fixture proves nothing is left under /sys/fs/cgroup/*/tcluster/<node>."""

from __future__ import annotations

import os
import select
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from tcluster.agent.runtime import host_mounts
from tcluster.agent.runtime.base import LaunchError, RuntimeSetupError, Started, TaskSpec
from tcluster.agent.runtime.cgroup1 import TASK_CONTROLLERS, Cgroup1Runtime
from tcluster.agent.runtime.detect import CgroupMounts, choose_mode
from tcluster.resources import Resources

pytestmark = pytest.mark.system
MI = 2**20
EXIT_TIMEOUT_MS = 20_000


def _v1_mounts() -> CgroupMounts | str:
    """The host's v1 mounts, or why this test cannot run here."""
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    try:
        mounts, controllers = host_mounts()
        choose_mode(mounts, controllers, "cgroup1")
    except (OSError, RuntimeSetupError) as e:
        return f"no usable cgroup v1 hierarchies: {e}"
    for c in TASK_CONTROLLERS:
        root = mounts.v1_path(c)
        if root is None or not os.access(root, os.W_OK):
            return f"cgroup v1 hierarchy for {c} is not writable"
    return mounts


MOUNTS = _v1_mounts()
if isinstance(MOUNTS, str):
    pytestmark = [pytest.mark.system, pytest.mark.skip(reason=MOUNTS)]


def leftovers(node: str) -> list[Path]:
    return sorted(Path("/sys/fs/cgroup").glob(f"*/tcluster/{node}"))


@pytest.fixture
def node() -> str:
    return f"t{os.getpid()}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def runtime(node: str, tmp_path: Path) -> Iterator[Cgroup1Runtime]:
    assert isinstance(MOUNTS, CgroupMounts)
    rt = Cgroup1Runtime(f"tcluster/{node}", tmp_path / "state", MOUNTS)
    rt.setup()
    try:
        yield rt
    finally:
        for key in rt.containers():
            rt.remove(key)
        rt.close()
        assert leftovers(node) == []


def task(tmp_path: Path, key: str, command: tuple[str, ...], cpu: float = 0.5, memory: int = 64 * MI,
         **kw: object) -> TaskSpec:
    return TaskSpec(key=key, task_id=key, attempt=0, command=command, resources=Resources(cpu, memory),
                    stdout_path=str(tmp_path / f"{key}.out"), stderr_path=str(tmp_path / f"{key}.err"),
                    **kw)  # type: ignore[arg-type]


def wait_exit(started: Started, timeout_ms: int = EXIT_TIMEOUT_MS) -> None:
    poller = select.poll()
    poller.register(started.exit_fd, select.POLLIN)
    try:
        assert poller.poll(timeout_ms), f"task did not end within {timeout_ms} ms"
    finally:
        os.close(started.exit_fd)


def group(node: str, controller: str, key: str) -> Path:
    assert isinstance(MOUNTS, CgroupMounts)
    return Path(MOUNTS.v1_path(controller) or "") / "tcluster" / node / key


def test_limit_files_hold_the_computed_values(runtime: Cgroup1Runtime, node: str, tmp_path: Path) -> None:
    started = runtime.start(task(tmp_path, "lim.0", ("sleep", "30"), cpu=0.5, memory=64 * MI,
                                 cpu_limit=0.5, pids_max=64))
    read = lambda c, f: (group(node, c, "lim.0") / f).read_text().strip()  # noqa: E731
    assert read("cpu", "cpu.shares") == "512"
    assert (read("cpu", "cpu.cfs_period_us"), read("cpu", "cpu.cfs_quota_us")) == ("100000", "50000")
    assert read("memory", "memory.limit_in_bytes") == str(64 * MI)
    assert read("memory", "memory.memsw.limit_in_bytes") == str(64 * MI)
    assert read("pids", "pids.max") == "64"
    runtime.remove("lim.0")
    wait_exit(started)
    assert runtime.containers() == []


def test_task_is_in_its_groups_before_exec(runtime: Cgroup1Runtime, node: str, tmp_path: Path) -> None:
    wait_exit(runtime.start(task(tmp_path, "cg.0", ("cat", "/proc/self/cgroup"))))
    lines = (tmp_path / "cg.0.out").read_text().splitlines()
    where = {ctl: path for _, ctls, path in (line.split(":", 2) for line in lines) for ctl in ctls.split(",")}
    for controller in ("memory", "cpu", "cpuacct", "pids", "freezer"):
        assert where[controller] == f"/tcluster/{node}/cg.0", lines
    assert runtime.exit_status("cg.0").exit_code == 0


def test_exit_code_and_signal_come_back(runtime: Cgroup1Runtime, tmp_path: Path) -> None:
    wait_exit(runtime.start(task(tmp_path, "ex.0", ("sh", "-c", "exit 3"))))
    status = runtime.exit_status("ex.0")
    assert (status.exit_code, status.signal, status.oom_killed, status.reason) == (3, 0, False, "")
    wait_exit(runtime.start(task(tmp_path, "sig.0", ("sh", "-c", "kill -TERM $$"))))
    status = runtime.exit_status("sig.0")
    assert (status.exit_code, status.signal) == (None, 15)
    assert status.finished_at > 1.6e9


def test_missing_program_and_unknown_user_are_launch_errors(runtime: Cgroup1Runtime, node: str,
                                                            tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="exec failed: No such file or directory"):
        runtime.start(task(tmp_path, "miss.0", ("no-such-program-tcl",)))
    assert not any(group(node, c, "miss.0").exists() for c in TASK_CONTROLLERS)
    with pytest.raises(LaunchError, match="user 'no-such-user-tcl' does not exist"):
        runtime.start(task(tmp_path, "usr.0", ("true",), user="no-such-user-tcl"))
    assert runtime.containers() == []


def test_task_runs_as_the_requested_user(runtime: Cgroup1Runtime, tmp_path: Path) -> None:
    wait_exit(runtime.start(task(tmp_path, "nob.0", ("id", "-u"), user="nobody", workdir="/")))
    assert (tmp_path / "nob.0.out").read_text().strip() == "65534"


def test_busy_loop_shows_cpu_and_memory(runtime: Cgroup1Runtime, tmp_path: Path) -> None:
    # Spins until it has used 3 s of CPU itself, so a busy machine only makes it slower.
    loop = "import time\nwhile time.process_time() < 3: pass"
    started = runtime.start(task(tmp_path, "busy.0", (sys.executable, "-c", loop), cpu=1.0))
    deadline = time.monotonic() + 20
    usage = runtime.sample("busy.0")
    while usage is not None and usage.cpu_ns <= 0.5e9 and time.monotonic() < deadline:
        time.sleep(0.1)
        usage = runtime.sample("busy.0")
    assert usage is not None and usage.cpu_ns > 0.5e9 and usage.memory_bytes > 0
    assert usage.user_ns > 0 and usage.pids >= 1 and usage.oom_kills == 0
    runtime.remove("busy.0")
    wait_exit(started)
    assert runtime.sample("busy.0") is None


def test_memory_hog_is_oom_killed(runtime: Cgroup1Runtime, tmp_path: Path) -> None:
    hog = "b = b'x' * (200 * 2**20)"       # bytes * int touches every page (bytearray(n) would not)
    wait_exit(runtime.start(task(tmp_path, "oom.0", (sys.executable, "-c", hog), memory=64 * MI)))
    status = runtime.exit_status("oom.0")
    assert (status.exit_code, status.signal, status.oom_killed, status.reason) == (None, 9, True, "OOMKilled")


def test_remove_kills_forked_children_and_leaves_nothing(runtime: Cgroup1Runtime, node: str,
                                                         tmp_path: Path) -> None:
    started = runtime.start(task(tmp_path, "fork.0", ("sh", "-c", "sleep 100 & sleep 100")))
    pids_file = group(node, "pids", "fork.0") / "cgroup.procs"
    deadline = time.monotonic() + 10
    while len(pids_file.read_text().split()) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    pids = [int(p) for p in pids_file.read_text().split()]
    assert len(pids) == 3                      # sh and both sleeps
    runtime.remove("fork.0")
    wait_exit(started)
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert not any(group(node, c, "fork.0").exists() for c in TASK_CONTROLLERS)
    runtime.remove("fork.0")                   # idempotent
    assert runtime.containers() == []


def test_signal_reaches_every_process(runtime: Cgroup1Runtime, tmp_path: Path) -> None:
    started = runtime.start(task(tmp_path, "term.0", ("sh", "-c", "sleep 100 & wait")))
    time.sleep(0.2)
    runtime.signal("term.0", 15)
    wait_exit(started)
    assert runtime.exit_status("term.0").signal == 15
