"""Preemption that respects gangs and the queue tree, through the real binaries
(README, "Preemption"; review-reliability-649a338.md §6-7 reproduced on a 2-core agent
with the shares of the review's 4- and 10-core nodes):

- a's 4-task gang fills the node and b waits with one task: one member used to be
  preempted and the gang's restart took a from 1.00 to 0.00 against its 0.50; now the
  victim would be the whole gang, so nothing is preempted and `tcl why` says so;
- a plain task of the same queue is taken instead of a gang member;
- the README's ads/dev tree: dev.prod used to take ads from 0.60 to 0.30; now it takes
  from dev.test and ads keeps its 0.60.

The shares each test reaches are printed (-s) for the notes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testkit.procs import cgroup_v1_usable, tcl, tcl_json, wait_job, wait_until
from tests.e2e.test_preemption import AFTER_S, GRACE_S, Cluster, running

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
README_TREE = ("queues:\n  ads: {weight: 60, queues: {prod: {weight: 90}, test: {weight: 10}}}\n"
               "  dev: {weight: 40, queues: {prod: {weight: 90}, test: {weight: 10}}}\n")


def submit(c: Cluster, queue: str, tasks: int, cpu: float, *extra: str) -> str:
    return tcl(c.address, "submit", "--queue", queue, "--tasks", str(tasks), "--cpu", str(cpu), "--mem", "16Mi",
               *extra, "--", "sleep", "600").stdout.strip()


def all_running(c: Cluster, job: str, n: int) -> None:
    wait_until(lambda: running(wait_job(c.address, job, {"RUNNING"})) == n, 30)


def preemptions(c: Cluster, job: str) -> int:
    return sum(t["preemptions"] for t in tcl_json(c.address, "status", job)["tasks"])  # type: ignore[index]


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    c = Cluster(tmp_path, **getattr(request, "param", {}))
    try:
        yield c
    finally:
        c.stop()


def test_a_gang_is_not_broken_for_one_task(cluster: Cluster) -> None:
    gang = submit(cluster, "a", 4, 0.5, "--gang")
    all_running(cluster, gang, 4)
    time.sleep(1.2)                                             # past --preempt-min-runtime-s
    b = submit(cluster, "b", 1, 0.5)
    wait_until(lambda: "whole gang" in tcl_json(cluster.address, "status", b)["pending_reason"],  # type: ignore[index]
               AFTER_S + 15)
    time.sleep(AFTER_S + GRACE_S + 1)                           # a decision would have shown by now
    shares = cluster.shares()
    print(f"\ngang case: a {shares['a']:.2f} b {shares['b']:.2f} (the review saw a 0.00 b 0.25)")
    assert shares == {"a": 1.0, "b": 0.0} and preemptions(cluster, gang) == 0
    assert running(tcl_json(cluster.address, "status", gang)) == 4  # type: ignore[arg-type]
    why = tcl(cluster.address, "why", b).stdout
    assert "queue b below its share (0.00 < 0.25)" in why and "whole gang" in why


def test_a_plain_task_is_the_victim_not_a_gang_member(cluster: Cluster) -> None:
    plain = submit(cluster, "a", 2, 0.5)
    all_running(cluster, plain, 2)
    gang = submit(cluster, "a", 2, 0.5, "--gang")               # the youngest: first in line before the fix
    all_running(cluster, gang, 2)
    time.sleep(1.2)
    b = submit(cluster, "b", 1, 0.5)
    wait_until(lambda: running(tcl_json(cluster.address, "status", b)) == 1, AFTER_S + GRACE_S + 20)  # type: ignore[arg-type]
    assert cluster.shares() == {"a": 0.75, "b": 0.25}
    assert preemptions(cluster, plain) == 1 and preemptions(cluster, gang) == 0
    assert running(tcl_json(cluster.address, "status", gang)) == 2  # type: ignore[arg-type]


@pytest.mark.parametrize("cluster", [{"queues": README_TREE}], indirect=True)
def test_readme_tree_ads_keeps_its_guarantee(cluster: Cluster) -> None:
    ads = submit(cluster, "ads.test", 6, 0.2)                   # 0.60 of the node: ads' whole guarantee
    dev = submit(cluster, "dev.test", 4, 0.2)
    all_running(cluster, ads, 6)
    all_running(cluster, dev, 4)
    time.sleep(1.2)
    prod = submit(cluster, "dev.prod", 4, 0.2)
    wait_until(lambda: running(tcl_json(cluster.address, "status", prod)) == 3, AFTER_S + GRACE_S + 20)  # type: ignore[arg-type]
    time.sleep(AFTER_S + GRACE_S + 1)                           # and no more: dev.test is at its floor
    shares = cluster.shares()
    print(f"\ntree case: {shares} (the review saw ads 0.30, dev 0.70)")
    assert (shares["ads"], shares["dev"]) == (0.6, 0.4)
    assert (shares["dev.prod"], shares["dev.test"]) == (0.3, 0.1)
    assert preemptions(cluster, ads) == 0 and preemptions(cluster, dev) == 3


def test_a_whole_gang_is_preempted_and_requeued_together(cluster: Cluster) -> None:
    """a runs two 2-task gangs (1.00), b waits with one task: one gang goes whole (a keeps
    its 0.50), both its members are requeued once, the other gang is untouched."""
    first = submit(cluster, "a", 2, 0.5, "--gang")
    all_running(cluster, first, 2)
    second = submit(cluster, "a", 2, 0.5, "--gang")
    all_running(cluster, second, 2)
    time.sleep(1.2)
    b = submit(cluster, "b", 1, 0.5)
    wait_until(lambda: running(tcl_json(cluster.address, "status", b)) == 1, AFTER_S + GRACE_S + 20)  # type: ignore[arg-type]
    jobs = {j: tcl_json(cluster.address, "status", j)["tasks"] for j in (first, second)}  # type: ignore[index]
    hit = [j for j, tasks in jobs.items() if any(t["preemptions"] for t in tasks)]
    assert len(hit) == 1, jobs
    assert [t["preemptions"] for t in jobs[hit[0]]] == [1, 1]
    assert all(t["state"] == "PENDING" for t in jobs[hit[0]])
    assert cluster.shares() == {"a": 0.5, "b": 0.25}
