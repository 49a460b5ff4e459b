"""The user level and decayed usage through the real binaries: `tcl-master init`, a joined
agent with the cgroup runtime, two users with tokens (`tcl login`), jobs in one leaf.

- 8 one-task jobs of alice against one 8-task job of bob split the leaf 50/50.
- With --usage-half-life, after alice ran the whole cluster alone, bob (the light user)
  gets most of the slots her tasks free: the weights follow the decayed usage.

The agent starts after the jobs are in, so one round sees all of them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from testkit.procs import BIN, Proc, cgroup_v1_usable, sweep_node
from tests.e2e.test_users import User, master_cmd, unix_users  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
SLEEP = ("--queue", "lab", "--cpu", "0.25", "--mem", "32Mi", "--")


class Cluster:
    """A secure master with `lab` (share: users by default), users alice and bob, one agent
    of 2 CPUs started on demand (8 slots of 0.25 CPU)."""

    def __init__(self, tmp: Path, unix: list[str], *master_flags: str) -> None:
        self.tmp, self.data = tmp, tmp / "master"
        master_cmd("init", "--data-dir", str(self.data))
        (tmp / "q.yaml").write_text("queues:\n  lab: {}\n")
        self.master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(self.data),
                            "--queues", str(tmp / "q.yaml"), "--heartbeat-interval-s", "0.5", "--http", "off",
                            *master_flags], tmp / "master.log")
        self.node = f"e2e-fair-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.agent: Proc | None = None
        self.address = "127.0.0.1:" + self.master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)").group(1)
        self.users = {}
        for name, unix_user in zip(("alice", "bob"), unix):
            token = master_cmd("user", "add", name, "--unix-user", unix_user, "--queues", "lab",
                               "--data-dir", str(self.data))
            self.users[name] = User(self.address, tmp / name)
            self.users[name].tcl("login", "--master", self.address, stdin=token)

    def start_agent(self) -> None:
        join = master_cmd("join-token", "create", "--data-dir", str(self.data)).strip()
        subprocess.run([str(BIN / "tcl-agent"), "join", "--master", self.address, "--token", join, "--node", self.node,
                        "--state-dir", str(self.tmp / self.node)], check=True, capture_output=True, timeout=60)
        self.agent = Proc([str(BIN / "tcl-agent"), "--state-dir", str(self.tmp / self.node), "--runtime", "cgroup1",
                           "--cpus", "2", "--memory", "2Gi", "--heartbeat-interval-s", "0.5"], self.tmp / "agent.log")
        self.agent.wait_for_output(r"registered with")

    def running_by_user(self) -> dict[str, int]:
        """From `tcl queues -o json`: the user rows under lab."""
        rows = json.loads(self.users["alice"].tcl("queues", "-o", "json").stdout)["queues"]
        counts = {"alice": 0, "bob": 0}
        counts.update({q["user"]: q["running_tasks"] for q in rows if q["user"]})
        return counts

    def settle(self, total: int, timeout_s: float = 60) -> dict[str, int]:
        deadline = time.monotonic() + timeout_s
        while sum((counts := self.running_by_user()).values()) < total:
            assert time.monotonic() < deadline, counts
            time.sleep(0.2)
        return counts

    def stop(self) -> None:
        if self.agent is not None:
            self.agent.stop()
        self.master.stop()
        sweep_node(self.node, self.tmp / self.node)


@pytest.fixture
def cluster_factory(tmp_path: Path, unix_users: list[str]) -> Iterator[list[Cluster]]:  # noqa: F811
    made: list[Cluster] = []
    yield made
    for cluster in made:
        cluster.stop()


def test_eight_one_task_jobs_against_one_eight_task_job_split_the_queue_evenly(
        tmp_path: Path, unix_users: list[str], cluster_factory: list[Cluster]) -> None:  # noqa: F811
    cluster = Cluster(tmp_path, unix_users)
    cluster_factory.append(cluster)
    alice, bob = cluster.users["alice"], cluster.users["bob"]
    mine = [alice.tcl("submit", *SLEEP, "sleep", "300").stdout.strip() for _ in range(8)]
    bob.tcl("submit", "--tasks", "8", *SLEEP, "sleep", "300")
    cluster.start_agent()
    assert cluster.settle(8) == {"alice": 4, "bob": 4}
    table = alice.tcl("queues").stdout
    assert re.search(r"@alice\s+1\s+0\.500\s+0\.500", table) and re.search(r"@bob\s+1\s+0\.500\s+0\.500", table), table
    waiting = next(j for j in mine if alice.state(j) == "PENDING")
    why = json.loads(alice.tcl("why", waiting, "-o", "json").stdout)
    assert why["held_back_by"]["level"] in ("user", "queue"), why


def test_with_a_half_life_the_light_user_gets_the_freed_slots(
        tmp_path: Path, unix_users: list[str], cluster_factory: list[Cluster]) -> None:  # noqa: F811
    cluster = Cluster(tmp_path, unix_users, "--usage-half-life", "60s")
    cluster_factory.append(cluster)
    alice, bob = cluster.users["alice"], cluster.users["bob"]
    cluster.start_agent()
    first = alice.tcl("submit", "--tasks", "8", *SLEEP, "sleep", "8").stdout.strip()
    assert cluster.settle(8) == {"alice": 8, "bob": 0}
    alice.tcl("submit", "--tasks", "8", *SLEEP, "sleep", "300")   # both wait while alice's first job runs
    bob.tcl("submit", "--tasks", "8", *SLEEP, "sleep", "300")
    alice.wait(first, {"SUCCEEDED"}, timeout_s=60)
    counts = cluster.settle(8)
    # Without decay the user level alone gives 4 and 4 (the test above); alice's weight
    # is halved by her usage, so bob gets about two slots for each of hers.
    assert counts["bob"] >= 5, counts
    usage = json.loads(alice.tcl("queues", "-o", "json").stdout)["queues"]
    by_path = {q["path"]: q["decayed_usage_s"] for q in usage}
    assert by_path["lab/alice"] > by_path["lab/bob"], by_path     # her 8 s of the whole cluster weigh more
