"""Issue 36: the fence holds without an agent for `--image` (docker) tasks too. A container
has no shim, so the agent starts a fence watcher beside each docker task of a job with
retries (`tcl-shim --watch`, agent/runtime/dockerfence.py). SIGKILL the agent and keep it
down: the container's processes are gone once the lease is fence_s + 1 s old, before the
master's LOST could start attempt 2; the agent, back, reports the attempt KILLED. An agent
back within the fence keeps the container running, with one watcher, not two. Through the
real binaries and a private dockerd (bench/dockerd.py); skipped with the reason where
dockerd cannot start."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.dockerd import Dockerd
from testkit.faultcluster import Cluster, skip_reason, wait_for

pytestmark = pytest.mark.system
NODE_TIMEOUT_S = 2.0
LOST_TIMEOUT_S = 12.0      # fence = 2 + 12/2 = 8 s (the watcher: <= 9.25 s); LOST at 14 s of silence
FENCE_S = NODE_TIMEOUT_S + LOST_TIMEOUT_S / 2


@pytest.fixture
def engine(docker_engine: Dockerd) -> Dockerd:
    """The session's private dockerd (testkit/docker_engine.py)."""
    why = skip_reason()
    if why:
        pytest.skip(why)
    return docker_engine


@pytest.fixture
def cluster(tmp_path: Path, engine: Dockerd) -> Iterator[Cluster]:
    c = Cluster(tmp_path, node_timeout_s=NODE_TIMEOUT_S, lost_timeout_s=LOST_TIMEOUT_S)
    try:
        yield c
    finally:
        for job in c.tcl_json("jobs", "--all", "--all-users") if c.master is not None else []:   # type: ignore[union-attr]
            c.tcl("cancel", job["id"], check=False)
        c.close()


def container_pids(node: str) -> list[str]:
    """The processes of the node's containers (v1: the pids hierarchy; v2: the one tree)."""
    roots = [Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")]
    return [pid for root in roots for procs in (root / "tcluster" / f"{node}.docker").glob("*/cgroup.procs")
            for pid in procs.read_text().split()]


def watchers(state_dir: Path) -> list[int]:
    """Pids of the fence watchers of this agent's containers (by their lock in its state dir)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--watch" in argv and any(a.startswith(str(state_dir).encode()) for a in argv):
            found.append(int(proc.name))
    return found


def start(cluster: Cluster, engine: Dockerd, tag: str) -> tuple[str, str, Path]:
    cluster.start_master()
    agent = cluster.start_agent(tag, extra=("--docker-host", engine.url))
    job_id = cluster.tcl("submit", "--image", engine.image, "--retries", "1", "--cpu", "0.1", "--mem", "64Mi",
                         "--", "sh", "-c", "sleep 300").stdout.strip()
    cluster.wait_task(job_id, lambda t: t["state"] == "RUNNING", "RUNNING", timeout_s=90)
    wait_for(lambda: container_pids(agent.name), 10, "the container's processes")
    wait_for(lambda: watchers(agent.state_dir), 10, "the container's fence watcher")
    return job_id, agent.name, agent.state_dir


def test_a_dead_agents_container_is_fenced_before_the_master_could_retry(cluster: Cluster, engine: Dockerd) -> None:
    """Proves: with the agent SIGKILLed and kept down, the container's processes are gone
    between the fence and the master's LOST (before the fix they ran on for good)."""
    job_id, node, state_dir = start(cluster, engine, "dkfence")
    killed = time.monotonic()
    cluster.kill_agent(node, signal.SIGKILL)
    assert container_pids(node), "the container should outlive its agent"
    wait_for(lambda: not container_pids(node), NODE_TIMEOUT_S + LOST_TIMEOUT_S + 30, "the container fenced")
    gone_after = time.monotonic() - killed
    # The watcher never fences early (the lease runs FENCE_S + 1 s from the agent's last
    # word, which is at most a heartbeat before the kill), and it fenced before LOST.
    assert FENCE_S < gone_after + 1.0, gone_after
    task = cluster.status(job_id)["tasks"][0]
    assert task["attempt"] == 1 and task["state"] != "PENDING", task    # not yet re-placed
    records = list((state_dir / "docker-fence").glob("*.fenced"))
    assert len(records) == 1 and '"fenced": true' in records[0].read_text()
    wait_for(lambda: not watchers(state_dir), 10, "the watcher exits with its container")
    print(f"\ncontainer fenced {gone_after:.1f} s after the agent's SIGKILL (fence {FENCE_S:.0f} s, "
          f"LOST at {NODE_TIMEOUT_S + LOST_TIMEOUT_S:.0f} s)")
    # The agent, back, reports attempt 1 KILLED with the watcher's reason (as a shim's fence
    # is reported); back after the master's LOST instead, attempt 1 is LOST and re-placed.
    cluster.restart_agent(node)
    job = cluster.wait_task(job_id, lambda t: t["attempt"] > 1 or t["state"] not in ("RUNNING", "STARTING"),
                            "attempt 1 ended", timeout_s=60)
    task = job["tasks"][0]
    if task["attempt"] == 1:
        assert task["state"] == "KILLED" and "fence watcher stopped it" in task["reason"], task


def test_an_agent_back_within_the_fence_keeps_the_container_with_one_watcher(cluster: Cluster,
                                                                            engine: Dockerd) -> None:
    """Proves: an agent SIGKILLed and restarted at once re-adopts its container, renews the
    lease and starts no second watcher: well past the fence the same attempt runs on."""
    job_id, node, state_dir = start(cluster, engine, "dkkeep")
    before = watchers(state_dir)
    killed = time.monotonic()
    cluster.kill_agent(node, signal.SIGKILL)
    cluster.restart_agent(node)
    time.sleep(max(0.0, killed + FENCE_S + 4.0 - time.monotonic()))    # past the watcher's deadline
    task = cluster.status(job_id)["tasks"][0]
    assert (task["attempt"], task["state"]) == (1, "RUNNING"), task
    assert container_pids(node), "the container was stopped though its agent came back"
    assert watchers(state_dir) == before, (before, watchers(state_dir))
    assert not list((state_dir / "docker-fence").glob("*.fenced"))
    cluster.tcl("cancel", job_id)
    wait_for(lambda: not watchers(state_dir), 30, "the watcher exits with its container")
