"""Issue 36, finding 2: the fence holds without an agent. A SIGKILLed agent that stays down
fences nothing itself: the task's shim enforces the lease the agent left (last_heard.json:
its last word from the master and the fence), so the old copy is gone before the master's
LOST starts attempt 2 elsewhere. An agent back within the fence renews the lease: the task
runs on."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from testkit.faultcluster import Cluster, split_key, wait_for
from testkit.procs import node_subtrees

pytestmark = pytest.mark.system
NODE_TIMEOUT_S = 2.0
LOST_TIMEOUT_S = 12.0      # fence = 2 + 12/2 = 8 s (the shim: <= 9.25 s); LOST at 14 s of silence


def live_attempts(nodes: list[str]) -> dict[str, set[int]]:
    """Task id -> attempts with a process in their cgroup now (an emptied cgroup is left
    behind by a shim with no agent to remove it: only its processes count as a copy)."""
    alive: dict[str, set[int]] = defaultdict(set)
    for node in nodes:
        for base in node_subtrees(node):
            for group in (p for p in base.iterdir() if p.is_dir()):
                try:
                    if (group / "cgroup.procs").read_text().strip():
                        task_id, attempt = split_key(group.name)
                        alive[task_id].add(attempt)
                except (OSError, ValueError):
                    continue
    return alive


class CopySampler:
    """Samples every 50 ms; records each moment two attempts of one task had processes."""

    def __init__(self, nodes: list[str]) -> None:
        self.nodes, self.overlaps, self.samples = nodes, list[str](), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for task_id, attempts in live_attempts(self.nodes).items():
                if len(attempts) > 1:
                    self.overlaps.append(f"{task_id}: attempts {sorted(attempts)} at once")
            self.samples += 1

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(10)
        return self.overlaps


def exit_records(state_dir: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in state_dir.rglob("exit.json")]


@pytest.mark.parametrize("cluster", ["sqlite"], indirect=True)   # the node's clock; the store plays no part
def test_a_dead_agents_task_is_fenced_by_its_shim_before_the_master_retries(cluster: Cluster) -> None:
    """Proves: the agent is SIGKILLed and stays down; its re-runnable task's shim kills the
    task at the fence, so at no sampled moment do attempt 1 (node a) and attempt 2 (node b,
    started after LOST) both have processes. Before the fix attempt 1 ran on for good."""
    cluster.node_timeout_s, cluster.lost_timeout_s = NODE_TIMEOUT_S, LOST_TIMEOUT_S
    cluster.start_master()
    a = cluster.start_agent("shimfence-a")
    job_id = cluster.submit("sh", "-c", "sleep 300", retries=1)
    cluster.wait_task(job_id, lambda t: t["state"] == "RUNNING" and t["node"] == a.name, f"RUNNING on {a.name}")
    b = cluster.start_agent("shimfence-b")
    sampler = CopySampler([a.name, b.name])
    try:
        cluster.kill_agent(a.name, signal.SIGKILL)       # its task keeps running in its cgroup
        assert live_attempts([a.name]), "the task should outlive its agent"
        cluster.wait_task(job_id, lambda t: t["attempt"] == 2 and t["state"] == "RUNNING" and t["node"] == b.name,
                          "attempt 2 RUNNING on b", timeout_s=90)
        wait_for(lambda: sampler.samples > 20, 10, "copy samples")
    finally:
        overlaps = sampler.stop()
    assert overlaps == [], overlaps[:5]
    assert not live_attempts([a.name]), "attempt 1 still has processes on the dead agent's node"
    records = exit_records(a.state_dir)
    assert any(r.get("fenced") is True and r.get("signal") == 9 for r in records), records


@pytest.mark.parametrize("cluster", ["sqlite"], indirect=True)
def test_an_agent_back_within_the_fence_keeps_the_task(cluster: Cluster) -> None:
    """Proves: an agent SIGKILLed and restarted at once re-adopts its task and renews the
    lease: well past the fence the same attempt runs on, never stopped by its shim."""
    cluster.node_timeout_s, cluster.lost_timeout_s = NODE_TIMEOUT_S, LOST_TIMEOUT_S
    cluster.start_master()
    a = cluster.start_agent("shimkeep-a")
    job_id = cluster.submit("sh", "-c", "sleep 300", retries=1)
    cluster.wait_task(job_id, lambda t: t["state"] == "RUNNING", "RUNNING")
    killed = time.monotonic()
    cluster.kill_agent(a.name, signal.SIGKILL)
    cluster.restart_agent(a.name)
    fence_s = NODE_TIMEOUT_S + LOST_TIMEOUT_S / 2
    time.sleep(max(0.0, killed + fence_s + 4.0 - time.monotonic()))    # past the shim's deadline
    task = cluster.status(job_id)["tasks"][0]
    assert (task["attempt"], task["state"], task["node"]) == (1, "RUNNING", a.name), task
    assert list(live_attempts([a.name]).values()) == [{1}], live_attempts([a.name])
    assert not any(r.get("fenced") for r in exit_records(a.state_dir))
