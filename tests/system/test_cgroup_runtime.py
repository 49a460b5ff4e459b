"""The cgroup backend this host offers (v1 here, v2 in tests/vm), on real hierarchies as
root. Every test uses its own node name, and the fixture proves nothing is left behind."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from tcluster.agent.runtime.base import LaunchError
from tcluster.agent.runtime.cgroup1 import Cgroup1Runtime
from tcluster.agent.runtime.cgroup2 import Cgroup2Runtime
from tcluster.agent.rates import to_task_usage
from tcluster.wire.protobuf import usage_from_pb, usage_to_pb
from testkit.cgroups import (MI, MODE, SKIP_REASON, alive, dismantle, group_dirs, make_runtime, procs_file,
                                  read_limit, task, wait_exit)

pytestmark = [pytest.mark.system, pytest.mark.guest, pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)]
PY = "/usr/bin/python3"       # readable by the unprivileged task users (the venv may sit in /root)
Runtime = Cgroup1Runtime | Cgroup2Runtime


@pytest.fixture
def node() -> str:
    return f"t{os.getpid()}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def runtime(node: str, tmp_path: Path) -> Iterator[Runtime]:
    rt = make_runtime(node, tmp_path / "state")
    rt.setup()
    try:
        yield rt
    finally:
        dismantle(rt, node)


def wait_for(predicate, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_limit_files_hold_the_computed_values(runtime: Runtime, node: str, tmp_path: Path) -> None:
    started = runtime.start(task(tmp_path, "lim.0", ("sleep", "30"), cpu=0.5, memory=64 * MI,
                                 cpu_limit=0.5, pids_max=64, swap_bytes=16 * MI))
    read = lambda name: read_limit(node, "lim.0", name)  # noqa: E731
    if MODE == "cgroup1":
        assert read("cpu.shares") == "512"
        assert (read("cpu.cfs_period_us"), read("cpu.cfs_quota_us")) == ("100000", "50000")
        assert read("memory.limit_in_bytes") == str(64 * MI)
        assert read("memory.memsw.limit_in_bytes") == str(80 * MI)
    else:
        assert read("cpu.weight") == "50" and read("cpu.max") == "50000 100000"
        assert read("memory.max") == str(64 * MI) and read("memory.swap.max") == str(16 * MI)
    assert read("pids.max") == "64"
    runtime.remove("lim.0")
    wait_exit(started)
    assert runtime.containers() == []


def test_task_is_in_its_groups_before_exec(runtime: Runtime, node: str, tmp_path: Path) -> None:
    wait_exit(runtime.start(task(tmp_path, "cg.0", ("cat", "/proc/self/cgroup"))))
    lines = (tmp_path / "cg.0.out").read_text().splitlines()
    where = {ctl: path for _, ctls, path in (line.split(":", 2) for line in lines) for ctl in ctls.split(",")}
    wanted = ("memory", "cpu", "cpuacct", "pids", "freezer") if MODE == "cgroup1" else ("",)
    for controller in wanted:
        assert where[controller] == f"/tcluster/{node}/cg.0", lines
    assert runtime.exit_status("cg.0").exit_code == 0


def test_exit_code_and_signal_come_back(runtime: Runtime, tmp_path: Path) -> None:
    wait_exit(runtime.start(task(tmp_path, "ex.0", ("sh", "-c", "exit 3"))))
    status = runtime.exit_status("ex.0")
    assert (status.exit_code, status.signal, status.oom_killed, status.reason) == (3, 0, False, "")
    wait_exit(runtime.start(task(tmp_path, "sig.0", ("sh", "-c", "kill -TERM $$"))))
    status = runtime.exit_status("sig.0")
    assert (status.exit_code, status.signal) == (None, 15)
    assert status.finished_at > 1.6e9


def test_bad_input_is_a_launch_error_and_leaves_nothing(runtime: Runtime, node: str, tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="exec failed: No such file or directory"):
        runtime.start(task(tmp_path, "miss.0", ("no-such-program-tcl",)))
    with pytest.raises(LaunchError, match="user 'no-such-user-tcl' does not exist"):
        runtime.start(task(tmp_path, "usr.0", ("true",), user="no-such-user-tcl"))
    # A limit the kernel refuses: a CFS quota beyond its maximum (EINVAL on v1 and v2).
    with pytest.raises(LaunchError, match="cgroup refused"):
        runtime.start(task(tmp_path, "big.0", ("true",), cpu_limit=1e9))
    assert runtime.containers() == [] and not any(d.exists() for k in ("miss.0", "usr.0", "big.0")
                                                  for d in group_dirs(node, k))
    wait_exit(runtime.start(task(tmp_path, "ok.0", ("true",))))     # and it keeps serving
    assert runtime.exit_status("ok.0").exit_code == 0


def test_task_runs_as_the_requested_user_in_its_namespaces(runtime: Runtime, tmp_path: Path) -> None:
    script = "id -u; hostname; echo $$; ls -A /tmp; touch /tmp/x"
    wait_exit(runtime.start(task(tmp_path, "nob.0", ("sh", "-c", script), user="nobody")))
    assert (tmp_path / "nob.0.out").read_text().split() == ["65534", "nob.0", "2"]
    assert runtime.exit_status("nob.0").exit_code == 0


def test_busy_loop_shows_cpu_and_memory(runtime: Runtime, tmp_path: Path) -> None:
    # Spins until it has used 1.5 s of CPU itself, so a busy machine only makes it slower.
    loop = "import time\nwhile time.process_time() < 1.5: pass"
    started = runtime.start(task(tmp_path, "busy.0", (PY, "-c", loop), cpu=1.0))
    usage = runtime.sample("busy.0")
    assert wait_for(lambda: (u := runtime.sample("busy.0")) is not None and u.cpu_ns > 0.5e9)
    usage = runtime.sample("busy.0")
    assert usage is not None and usage.memory_bytes > 0
    assert usage.user_ns > 0 and usage.pids >= 2 and usage.oom_kills == 0     # init and python
    runtime.remove("busy.0")
    wait_exit(started)
    assert runtime.sample("busy.0") is None


def _fds_into(key: str) -> list[str]:
    """This process's open files inside the task's groups (the sampler keeps them open)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/sys/fs/cgroup") and f"/{key}/" in target:
            out.append(target)
    return out


def test_counter_files_stay_open_between_samples_and_close_with_the_group(runtime: Runtime,
                                                                        tmp_path: Path) -> None:
    # Kept open, the files must still read fresh counters, be closed when the group goes
    # (an open file pins a removed group in the kernel), and a group made again under the
    # same key must be read anew, not through the old descriptors.
    loop = "import time\nwhile time.process_time() < 0.6: pass\ntime.sleep(60)"
    for round_ in range(2):
        started = runtime.start(task(tmp_path, "fds.0", (PY, "-c", loop), cpu=1.0))
        first = runtime.sample("fds.0")
        assert first is not None and _fds_into("fds.0"), "the sampled files are kept open"
        held = sorted(_fds_into("fds.0"))
        assert wait_for(lambda: (u := runtime.sample("fds.0")) is not None and u.cpu_ns > first.cpu_ns + 3e8), \
            f"round {round_}: the counters read through kept files did not move"
        assert sorted(_fds_into("fds.0")) == held, "no file is opened twice"
        runtime.remove("fds.0")
        wait_exit(started)
        assert _fds_into("fds.0") == [], "the group's files are closed when it is removed"
        assert runtime.sample("fds.0") is None
        assert _fds_into("fds.0") == []


def test_page_cache_a_task_wrote_is_not_in_its_working_set(runtime: Runtime, tmp_path: Path) -> None:
    # 32 MiB written to its stdout file stay in the page cache, charged to the task's group,
    # on the inactive file list: usage counts them, the working set must not.
    write = ("import sys, time\nsys.stdout.buffer.write(b'x' * (32 << 20)); sys.stdout.flush()\n"
             "open('/dev/stderr', 'w').write('written\\n')\ntime.sleep(60)")
    started = runtime.start(task(tmp_path, "cache.0", (PY, "-c", write), memory=256 * MI))
    assert wait_for(lambda: (tmp_path / "cache.0.err").exists() and b"written" in (tmp_path / "cache.0.err").read_bytes())
    assert wait_for(lambda: (u := runtime.sample("cache.0")) is not None and u.inactive_file_bytes >= 16 * MI)
    raw = runtime.sample("cache.0")
    assert raw is not None
    usage = to_task_usage(None, raw, 0)
    assert usage.memory_inactive_file_bytes == raw.inactive_file_bytes <= usage.memory_file_bytes
    assert 0 < usage.working_set_bytes <= usage.memory_bytes - 16 * MI
    assert usage_from_pb(usage_to_pb(usage)).working_set_bytes == usage.working_set_bytes   # as the master sees it
    runtime.remove("cache.0")
    wait_exit(started)


def test_cpu_limit_is_a_hard_cap_and_throttles(runtime: Runtime, tmp_path: Path) -> None:
    loop = "import time\nwhile time.process_time() < 0.6: pass"
    started = runtime.start(task(tmp_path, "cap.0", (PY, "-c", loop), cpu=1.0, cpu_limit=0.2))
    assert wait_for(lambda: (u := runtime.sample("cap.0")) is not None and u.nr_throttled > 0 and u.throttled_ns > 0)
    usage = runtime.sample("cap.0")
    assert usage is not None and usage.throttled_ns > 0
    runtime.remove("cap.0")
    wait_exit(started)


def test_memory_hog_is_oom_killed(runtime: Runtime, tmp_path: Path) -> None:
    hog = "b = b'x' * (200 * 2**20)"       # bytes * int touches every page (bytearray(n) would not)
    wait_exit(runtime.start(task(tmp_path, "oom.0", (PY, "-c", hog), memory=64 * MI)))
    status = runtime.exit_status("oom.0")
    assert (status.exit_code, status.signal, status.oom_killed, status.reason) == (None, 9, True, "OOMKilled")
    usage = runtime.sample("oom.0")
    assert usage is not None and usage.oom_kills >= 1


def test_kill_reaches_forked_children_and_leaves_nothing(runtime: Runtime, node: str, tmp_path: Path) -> None:
    # setsid and a double fork: the classic ways out of a process group or session.
    script = "sleep 100 & setsid sh -c 'sleep 100 & sleep 100' & sleep 100"
    started = runtime.start(task(tmp_path, "fork.0", ("sh", "-c", script)))
    procs = procs_file(node, "fork.0")
    assert wait_for(lambda: len(procs.read_text().split()) >= 6)     # init, sh, 3 sleeps, sh
    pids = [int(p) for p in procs.read_text().split()]
    runtime.signal("fork.0", 9)                                      # the whole container at once
    wait_exit(started)
    assert not any(alive(pid) for pid in pids)
    assert runtime.exit_status("fork.0").signal == 9
    runtime.remove("fork.0")
    assert not any(d.exists() for d in group_dirs(node, "fork.0"))
    runtime.remove("fork.0")                   # idempotent
    assert runtime.containers() == []


def test_sigterm_reaches_every_process(runtime: Runtime, tmp_path: Path, node: str) -> None:
    started = runtime.start(task(tmp_path, "term.0", ("sh", "-c", "sleep 100 & wait")))
    assert wait_for(lambda: len(procs_file(node, "term.0").read_text().split()) >= 3)
    runtime.signal("term.0", 15)
    wait_exit(started)
    assert runtime.exit_status("term.0").signal == 15
