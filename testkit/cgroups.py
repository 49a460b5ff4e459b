"""Which real cgroup backend this host offers the system tests: cgroup1 here (hybrid v1),
cgroup2 inside the tests/vm guest. The same tests run against either."""

from __future__ import annotations

import os
import select
from pathlib import Path

from tcluster.agent.runtime import host_mounts
from tcluster.agent.runtime.base import Runtime, RuntimeSetupError, Started, TaskSpec
from tcluster.agent.runtime.cgroup1 import TASK_CONTROLLERS, Cgroup1Runtime
from tcluster.agent.runtime.cgroup2 import Cgroup2Runtime
from tcluster.agent.runtime.detect import CgroupMounts, choose_mode
from tcluster.domain.resources import Resources

MI = 2**20
EXIT_TIMEOUT_MS = 30_000


def host_cgroups() -> tuple[str, CgroupMounts] | str:
    """(mode, mounts) of the backend `auto` picks here, or why no cgroup test can run."""
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    try:
        mounts, controllers = host_mounts()
        mode = choose_mode(mounts, controllers, os.environ.get("TCL_TEST_RUNTIME", "auto"))
    except (OSError, RuntimeSetupError) as e:
        return f"no usable cgroup hierarchy: {e}"
    if mode == "cgroup1":
        for c in TASK_CONTROLLERS:
            root = mounts.v1_path(c)
            if root is None or not os.access(root, os.W_OK):
                return f"cgroup v1 hierarchy for {c} is not writable"
    elif mounts.v2 is None or not os.access(mounts.v2, os.W_OK):
        return "the cgroup2 mount is not writable"
    return mode, mounts


HOST = host_cgroups()
SKIP_REASON = HOST if isinstance(HOST, str) else ""
MODE = "" if isinstance(HOST, str) else HOST[0]


def make_runtime(node: str, state_dir: Path) -> Cgroup1Runtime | Cgroup2Runtime:
    assert not isinstance(HOST, str)
    mode, mounts = HOST
    if mode == "cgroup2":
        return Cgroup2Runtime(f"tcluster/{node}", state_dir, mounts)
    return Cgroup1Runtime(f"tcluster/{node}", state_dir, mounts)


def group_dirs(node: str, key: str = "") -> list[Path]:
    """Every directory of the task's container (one per v1 hierarchy; one on v2)."""
    assert not isinstance(HOST, str)
    mode, mounts = HOST
    rel = Path("tcluster") / node / key if key else Path("tcluster") / node
    if mode == "cgroup2":
        return [Path(mounts.v2 or "") / rel]
    return sorted({Path(p) / rel for c, p in mounts.v1 if c in TASK_CONTROLLERS})


def procs_file(node: str, key: str) -> Path:
    return group_dirs(node, key)[0] / "cgroup.procs"


def read_limit(node: str, key: str, name: str) -> str:
    for d in group_dirs(node, key):
        if (d / name).exists():
            return (d / name).read_text().strip()
    raise FileNotFoundError(name)


def leftovers(node: str) -> list[Path]:
    return [d for d in group_dirs(node) if d.exists()]


def remove_all(rt: Runtime) -> None:
    """Removes every task the runtime holds, then closes it."""
    for key in rt.containers():
        rt.remove(key)
    rt.close()


def dismantle(rt: Runtime, node: str) -> None:
    """remove_all; then no cgroup of the node may be left."""
    remove_all(rt)
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


def alive(pid: int) -> bool:
    try:
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
