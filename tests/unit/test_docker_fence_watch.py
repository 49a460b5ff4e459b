"""Issue 36: the fence watcher of a docker task (`tcl-shim --watch`, agent/runtime/dockerfence.py),
on a plain process in a cgroup v1 group standing in for a container: one watcher per key (a
second start finds the lock held), a live lease stops nothing, an expired one kills every
process of the group and is recorded, and the watcher exits with the container's init."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tcluster.agent.runtime.base import ExitStatus
from tcluster.agent.runtime.cgfs import wait_until
from tcluster.agent.runtime.dockerfence import fenced, forget, record_path, start_watch
from tests.unit.test_shim_lease import write_lease

V1_PIDS = Path("/sys/fs/cgroup/pids")
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not (V1_PIDS / "cgroup.procs").exists(),
                                reason="needs root and a cgroup v1 pids hierarchy")


@pytest.fixture
def container(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """An init with a setsid'ed child, both in their own group, as a container's would be."""
    group = V1_PIDS / f"tcl-test-watch-{os.getpid()}"
    group.mkdir()
    init = subprocess.Popen(["sh", "-c", f"echo $$ > {group}/cgroup.procs; setsid sleep 60 & exec sleep 60"])
    assert wait_until(lambda: len((group / "cgroup.procs").read_text().split()) == 2, 5.0)
    try:
        yield init, group / "cgroup.procs"
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            os.kill(int(pid), 9)
        init.wait(5)
        wait_until(lambda: not (group / "cgroup.procs").read_text().strip(), 5.0)
        group.rmdir()


def alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_an_expired_lease_kills_the_group_records_it_and_the_watcher_leaves(
        tmp_path: Path, container: tuple[subprocess.Popen[bytes], Path]) -> None:
    init, procs = container
    lease = tmp_path / "last_heard.json"
    write_lease(lease, silent_s=0.0, fence_s=1.0)            # runs out ~2 s from now
    line = start_watch(tmp_path / "fence", "j.0.1", str(lease), init.pid, [procs])
    assert line.startswith("watching ") and line.split()[1].isdigit(), line
    watcher = int(line.split()[1])
    assert start_watch(tmp_path / "fence", "j.0.1", str(lease), init.pid, [procs]) == "watching already"
    assert init.wait(15) == -9
    assert wait_until(lambda: not procs.read_text().strip(), 5.0), procs.read_text()   # the setsid'ed child too
    assert wait_until(lambda: not alive(watcher), 5.0), "the watcher outlived its container"
    status = fenced(tmp_path / "fence", "j.0.1", ExitStatus(None, 9, 5.0))
    assert status.fenced and "fence watcher stopped it" in status.reason and status.signal == 9
    forget(tmp_path / "fence", "j.0.1")
    assert list((tmp_path / "fence").iterdir()) == []


def test_a_live_lease_stops_nothing_and_the_watcher_leaves_with_the_init(
        tmp_path: Path, container: tuple[subprocess.Popen[bytes], Path]) -> None:
    init, procs = container
    lease = tmp_path / "last_heard.json"
    write_lease(lease, silent_s=0.0, fence_s=3600.0)
    watcher = int(start_watch(tmp_path / "fence", "j.0.1", str(lease), init.pid, [procs]).split()[1])
    assert not wait_until(lambda: init.poll() is not None, 1.5)
    init.kill()
    init.wait(5)
    assert wait_until(lambda: not alive(watcher), 5.0), "the watcher outlived its container"
    assert not record_path(tmp_path / "fence", "j.0.1").exists()
    assert fenced(tmp_path / "fence", "j.0.1", ExitStatus(0)) == ExitStatus(0)


def test_an_init_already_gone_gets_no_watcher(tmp_path: Path) -> None:
    done = subprocess.Popen(["true"])
    done.wait()
    assert start_watch(tmp_path / "fence", "j.0.1", str(tmp_path / "lease"), done.pid, [tmp_path / "cgroup.procs"]) == "ended"


def test_prune_forgets_only_the_files_of_containers_gone_from_the_engine(tmp_path: Path) -> None:
    """A container removed while the agent was down had no remove() to forget its files: the
    next start forgets those of every key the engine no longer lists, and only those."""
    from tcluster.agent.runtime.dockerfence import prune
    for key in ("j1.0.1", "j2.0.1", "j3.0.1"):
        record_path(tmp_path, key).write_text('{"fenced": true}')
        (tmp_path / f"{key}.lock").write_text("")
    (tmp_path / "notes.txt").write_text("not ours")
    assert prune(tmp_path, {"j2.0.1", "j9.0.1"}) == ["j1.0.1", "j3.0.1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j2.0.1.fenced", "j2.0.1.lock", "notes.txt"]
    assert prune(tmp_path / "absent", set()) == []
