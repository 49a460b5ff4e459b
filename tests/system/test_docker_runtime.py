"""The docker backend against a real, private dockerd (HOST.md's recipe: its own data and
exec roots and socket, no iptables, no bridge) and a busybox image imported locally.
The engine is stopped by its pid and the cgroups it leaves are removed."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Iterator

import docker
import pytest

from bench.dockerd import Dockerd, docker_missing
from tcluster.agent.runtime import host_mounts
from tcluster.agent.runtime.base import LaunchError, RuntimeSetupError, TaskSpec
from tcluster.agent.runtime.detect import choose_mode
from tcluster.agent.runtime.docker import DockerRuntime, docker_available
from tcluster.agent.runtime.dockerspec import cgroup_roots
from testkit.cgroups import MI, SKIP_REASON, remove_all, task, wait_exit

WHY = SKIP_REASON or docker_missing(cli=False) or ""
pytestmark = [pytest.mark.system, pytest.mark.docker, pytest.mark.skipif(bool(WHY), reason=WHY)]


def new_runtime(engine: Dockerd, node: str) -> DockerRuntime:
    mounts, controllers = host_mounts()
    rt = DockerRuntime(node, mounts, choose_mode(mounts, controllers), engine.url)
    rt.setup()
    return rt


@pytest.fixture
def node() -> str:
    return f"d{os.getpid()}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def runtime(engine: Dockerd, node: str) -> Iterator[DockerRuntime]:
    rt = new_runtime(engine, node)
    try:
        yield rt
    finally:
        remove_all(rt)
        assert rt.containers() == []
        assert [r / rt.parent for r in cgroup_roots() if (r / rt.parent).exists()] == []


def dtask(tmp_path: Path, engine: Dockerd, key: str, command: tuple[str, ...], **kw: object) -> TaskSpec:
    return task(tmp_path, key, command, image=engine.image, **kw)


def group(rt: DockerRuntime, key: str, controller: str) -> Path:
    info = rt._find(key)
    assert info is not None
    return Path(f"/sys/fs/cgroup/{controller}") / rt.parent / info["Id"]


def test_limits_are_in_the_containers_cgroup_files(runtime: DockerRuntime, engine: Dockerd, tmp_path: Path) -> None:
    started = runtime.start(dtask(tmp_path, engine, "lim.0", ("sleep", "30"), cpu=0.5, memory=64 * MI,
                                  cpu_limit=0.5, pids_max=64, swap_bytes=16 * MI))
    read = lambda ctl, name: (group(runtime, "lim.0", ctl) / name).read_text().strip()  # noqa: E731
    assert read("cpu", "cpu.shares") == "512"
    assert (read("cpu", "cpu.cfs_period_us"), read("cpu", "cpu.cfs_quota_us")) == ("100000", "50000")
    assert read("memory", "memory.limit_in_bytes") == str(64 * MI)
    assert read("memory", "memory.memsw.limit_in_bytes") == str(80 * MI)
    assert read("pids", "pids.max") == "64"
    usage = runtime.sample("lim.0")
    assert usage is not None and usage.pids == 1 and usage.memory_bytes > 0
    runtime.signal("lim.0", signal.SIGKILL)
    wait_exit(started)
    status = runtime.exit_status("lim.0")
    assert (status.exit_code, status.signal) == (None, signal.SIGKILL)


def test_exit_code_and_logs_in_the_task_files(runtime: DockerRuntime, engine: Dockerd, tmp_path: Path) -> None:
    spec = dtask(tmp_path, engine, "log.0", ("sh", "-c", "echo out-line; echo err-line >&2; exit 3"),
                 env=(("GREETING", "hello"),))
    wait_exit(runtime.start(spec))
    status = runtime.exit_status("log.0")
    assert (status.exit_code, status.signal, status.oom_killed) == (3, 0, False) and status.finished_at > 0
    assert Path(spec.stdout_path).read_text() == "out-line\n"
    assert Path(spec.stderr_path).read_text() == "err-line\n"
    runtime.remove("log.0")
    runtime.remove("log.0")                     # idempotent
    assert runtime.containers() == []


def test_over_the_memory_limit_is_oomkilled(runtime: DockerRuntime, engine: Dockerd, tmp_path: Path) -> None:
    hog = ("dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1")
    wait_exit(runtime.start(dtask(tmp_path, engine, "oom.0", hog, memory=64 * MI)))
    status = runtime.exit_status("oom.0")
    assert status.oom_killed and status.reason == "OOMKilled" and status.signal == signal.SIGKILL


def test_a_fork_bomb_stays_under_pids_max(runtime: DockerRuntime, engine: Dockerd, tmp_path: Path) -> None:
    # The forking subshell dies at the limit (a shell cannot go on without fork); the
    # container lives on as `sleep` with what was forked, so its counters can be read.
    bomb = "(i=0; while [ $i -lt 100 ]; do sleep 60 & i=$((i+1)); done) 2>/dev/null; exec sleep 60"
    started = runtime.start(dtask(tmp_path, engine, "bomb.0", ("sh", "-c", bomb), pids_max=16))
    deadline = time.monotonic() + 20
    usage = runtime.sample("bomb.0")
    while usage is not None and usage.pids_max_hits == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
        usage = runtime.sample("bomb.0")
    assert usage is not None and usage.pids <= 16 and usage.pids_max_hits > 0
    runtime.signal("bomb.0", signal.SIGKILL)
    wait_exit(started)
    assert runtime.sample("bomb.0") is None or runtime.sample("bomb.0").pids == 0  # type: ignore[union-attr]


def test_a_restarted_agent_adopts_running_and_ended_containers(engine: Dockerd, runtime: DockerRuntime, node: str,
                                                                tmp_path: Path) -> None:
    first = runtime.start(dtask(tmp_path, engine, "run.0", ("sh", "-c", "echo before; sleep 60")))
    done = runtime.start(dtask(tmp_path, engine, "done.0", ("sh", "-c", "echo finished; exit 7")))
    wait_exit(done)
    os.close(first.exit_fd)
    runtime.close()                                 # the agent stops; its containers do not
    again = new_runtime(engine, node)
    try:
        assert again.containers() == ["done.0", "run.0"]
        assert again.adopt("done.0") is None
        assert again.exit_status("done.0").exit_code == 7
        assert (tmp_path / "done.0.out").read_text() == "finished\n"
        adopted = again.adopt("run.0")
        assert adopted is not None and adopted.pid == first.pid
        again.signal("run.0", signal.SIGTERM)       # sh as PID 1 ignores TERM; sleep takes it
        again.signal("run.0", signal.SIGKILL)
        wait_exit(adopted)
        assert again.exit_status("run.0").signal == signal.SIGKILL
        assert (tmp_path / "run.0.out").read_text() == "before\n"
    finally:
        for key in again.containers():
            again.remove(key)
        again.close()


# Shell builtins only: the shell reads its own ids and capabilities (a child applet would
# drop a setuid euid on its own and hide what the shell had gained).
PROBE = 'while read -r k v; do case $k in Uid:|CapEff:|CapBnd:) echo "$k $v";; esac; done < /proc/self/status'


def test_a_setuid_root_file_in_the_image_gives_a_nobody_task_no_root(runtime: DockerRuntime, engine: Dockerd,
                                                                     tmp_path: Path) -> None:
    """The review's attack (finding 4): a setuid-root shell in the image. Without
    no-new-privileges it ran with euid 0 and the engine's default capabilities."""
    image = engine.import_setuid_image()
    spec = task(tmp_path, "suid.0", ("sh", "-c", f"/bin/busybox-suid ash -c '{PROBE}'; echo rc=$?; {PROBE}"),
                image=image, user="nobody")
    wait_exit(runtime.start(spec))
    runtime.exit_status("suid.0")                       # the log copy is complete after this
    out, err = Path(spec.stdout_path).read_text(), Path(spec.stderr_path).read_text()
    print(f"\n[suid] stdout:\n{out}[suid] stderr:\n{err}")
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("Uid:")] == ["Uid: 65534\t65534\t65534\t65534"], out
    assert "rc=1" in lines and "setres" in err              # the setuid shell could not become root
    assert "CapEff: 0000000000000000" in lines and "CapBnd: 0000000000000000" in lines, out


def test_a_missing_image_fails_the_start_clearly(runtime: DockerRuntime, tmp_path: Path) -> None:
    spec = task(tmp_path, "img.0", ("true",), image="tcl-no-such-image:1")
    with pytest.raises(LaunchError, match="image 'tcl-no-such-image:1' is not on this node and cannot be pulled"):
        runtime.start(spec)
    assert runtime.containers() == []


def test_a_bad_command_fails_the_start(runtime: DockerRuntime, engine: Dockerd, tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="cannot start the container"):
        runtime.start(dtask(tmp_path, engine, "cmd.0", ("/no/such/program",)))
    assert runtime.containers() == []


def test_a_dead_engine_is_a_setup_error_and_a_launch_error(runtime: DockerRuntime, engine: Dockerd,
                                                           tmp_path: Path, node: str) -> None:
    dead = f"unix://{tmp_path}/no-engine.sock"
    assert "no docker engine at" in (docker_available(dead) or "")
    mounts, controllers = host_mounts()
    with pytest.raises(RuntimeSetupError, match="docker backend unavailable"):
        DockerRuntime(node, mounts, choose_mode(mounts, controllers), dead).setup()
    live, runtime._client = runtime._client, docker.APIClient(base_url=dead, timeout=2, version="1.41")   # it died after setup
    try:
        with pytest.raises(LaunchError, match="docker engine at"):
            runtime.start(dtask(tmp_path, engine, "dead.0", ("true",)))
    finally:
        runtime._client = live
