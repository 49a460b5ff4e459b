"""What a task may see and do, on the cgroup backend this host offers (v1 here, v2 in
tests/vm), with and without namespaces: its OOM score and privileges, its private /tmp,
a working directory it can use, private log files, and the log cap with rotation.
Every test uses its own node name; the fixture proves nothing is left behind."""

from __future__ import annotations

import contextlib
import os
import stat
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from tcluster.agent.runtime.cgroup1 import Cgroup1Runtime
from tcluster.agent.runtime.cgroup2 import Cgroup2Runtime
from testkit.cgroups import HOST, MI, SKIP_REASON, dismantle, task, wait_exit

pytestmark = [pytest.mark.system, pytest.mark.guest, pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)]
Runtime = Cgroup1Runtime | Cgroup2Runtime
NOBODY = 65534
BIG_WAIT_MS = 600_000          # 500 MiB through the shim, also under software emulation (tests/vm)


def make(node: str, state_dir: Path, namespaces: bool) -> Runtime:
    assert not isinstance(HOST, str)
    mode, mounts = HOST
    if mode == "cgroup2":
        return Cgroup2Runtime(f"tcluster/{node}", state_dir, mounts, namespaces=namespaces)
    return Cgroup1Runtime(f"tcluster/{node}", state_dir, mounts, namespaces=namespaces)


@contextlib.contextmanager
def node_runtime(tmp_path: Path, namespaces: bool) -> Iterator[Runtime]:
    node = f"i{os.getpid()}-{uuid.uuid4().hex[:8]}"
    rt = make(node, tmp_path / "state", namespaces=namespaces)
    rt.setup()
    try:
        yield rt
    finally:
        dismantle(rt, node)


@pytest.fixture(params=[True, False], ids=["ns", "no-ns"])
def runtime(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Runtime]:
    with node_runtime(tmp_path, namespaces=request.param) as rt:
        yield rt


@pytest.fixture
def ns_runtime(tmp_path: Path) -> Iterator[Runtime]:
    """Namespaces on (the default). For the slow test: the copy path is the same without."""
    with node_runtime(tmp_path, namespaces=True) as rt:
        yield rt


def namespaced(runtime: Runtime) -> bool:
    return runtime._namespaces        # noqa: SLF001  (the fixture's parameter, read back)


@contextlib.contextmanager
def agent_oom_score_adj() -> Iterator[int]:
    """This process (standing in for the agent, whose unit sets OOMScoreAdjust=-900) runs
    with a non-zero score while the block runs; restored after. Lowering it needs
    CAP_SYS_RESOURCE, which some sandboxes drop: then +500 shows the same inheritance."""
    path = Path("/proc/self/oom_score_adj")
    before = path.read_text().strip()
    for value in (-900, 500):
        try:
            path.write_text(str(value))
            break
        except PermissionError:
            continue
    try:
        yield value
    finally:
        path.write_text(before)


def wait_for_text(path: Path, words: int, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().split()) >= words:
            return True
        time.sleep(0.01)
    return False


def test_task_has_oom_score_adj_0_and_no_new_privs(runtime: Runtime, tmp_path: Path) -> None:
    script = "cat /proc/$$/oom_score_adj; grep NoNewPrivs /proc/$$/status; exec sleep 60"
    with agent_oom_score_adj() as agent_value:
        started = runtime.start(task(tmp_path, "oom.0", ("sh", "-c", script), user="nobody"))
    out = tmp_path / "oom.0.out"
    try:
        assert wait_for_text(out, 3)
        assert out.read_text().split() == ["0", "NoNewPrivs:", "1"]
        # The supervisor keeps the agent's protection: it must outlive an OOM to record it.
        assert Path(f"/proc/{started.pid}/oom_score_adj").read_text().strip() == str(agent_value)
    finally:
        runtime.remove("oom.0")
        wait_exit(started)


def test_default_working_directory_works_for_the_task_user(runtime: Runtime, tmp_path: Path) -> None:
    script = "pwd; cd . && ls -A >/dev/null && echo ok"
    wait_exit(runtime.start(task(tmp_path, "pwd.0", ("sh", "-c", script), user="nobody")))
    assert runtime.exit_status("pwd.0").exit_code == 0, (tmp_path / "pwd.0.err").read_text()
    where, ok = (tmp_path / "pwd.0.out").read_text().split()
    # With namespaces: its private /tmp. Without: nobody's home does not exist, so "/".
    assert (where, ok) == ("/tmp" if namespaced(runtime) else "/", "ok")


def test_private_tmp_belongs_to_the_task_user(runtime: Runtime, tmp_path: Path) -> None:
    wait_exit(runtime.start(task(tmp_path, "tmp.0", ("stat", "-c", "%u %a", "/tmp"), user="nobody")))
    seen = (tmp_path / "tmp.0.out").read_text().split()
    if namespaced(runtime):
        assert seen == [str(NOBODY), "700"]
    else:                         # no private one: the host's /tmp, and none is made
        assert seen == ["0", "1777"] and not (runtime.container_dir("tmp.0") / "tmp").exists()


def test_per_task_files_are_private(runtime: Runtime, tmp_path: Path) -> None:
    wait_exit(runtime.start(task(tmp_path, "own.0", ("sh", "-c", "echo out; echo err >&2"), user="nobody")))
    assert runtime.exit_status("own.0").exit_code == 0
    for name in ("own.0.out", "own.0.err"):
        st = (tmp_path / name).stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY, 0o600), name
    cdir = runtime.container_dir("own.0")
    st = cdir.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)
    assert stat.S_IMODE((cdir / "shim.spec").stat().st_mode) == 0o600
    assert stat.S_IMODE((cdir / "exit.json").stat().st_mode) & 0o077 == 0


def test_log_cap_rotates_500_mib_of_stdout(ns_runtime: Runtime, tmp_path: Path) -> None:
    # ~35 s under software emulation (tests/vm), where the page cache alone takes ~6 s/100 MiB.
    runtime = ns_runtime
    script = f"head -c {500 * MI} /dev/zero; echo END; echo little >&2"
    started = runtime.start(task(tmp_path, "big.0", ("sh", "-c", script), user="nobody", log_max_bytes=MI))
    wait_exit(started, BIG_WAIT_MS)
    assert runtime.exit_status("big.0").exit_code == 0
    assert sorted(p.name for p in tmp_path.glob("big.0.*")) == ["big.0.err", "big.0.out", "big.0.out.1"]
    out, older = tmp_path / "big.0.out", tmp_path / "big.0.out.1"
    assert 0 < out.stat().st_size <= MI and 0 < older.stat().st_size <= MI
    # The newest bytes end the current file (cut at exactly 1 MiB, it may hold only them).
    assert (older.read_bytes() + out.read_bytes()).endswith(b"\0\0END\n")
    assert (tmp_path / "big.0.err").read_text() == "little\n"
    st = older.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY, 0o600)


def test_small_output_without_a_cap_goes_straight_to_the_files(runtime: Runtime, tmp_path: Path) -> None:
    script = "echo out; echo err >&2; [ -f /proc/$$/fd/1 ] && [ -f /proc/$$/fd/2 ] && exit 4"
    wait_exit(runtime.start(task(tmp_path, "small.0", ("sh", "-c", script))))
    assert runtime.exit_status("small.0").exit_code == 4           # regular files, no pipes
    assert (tmp_path / "small.0.out").read_text() == "out\n"
    assert (tmp_path / "small.0.err").read_text() == "err\n"
    assert sorted(p.name for p in tmp_path.glob("small.0.*")) == ["small.0.err", "small.0.out"]
