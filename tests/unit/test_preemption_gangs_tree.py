"""Preemption that respects gangs and the queue tree (README, "Preemption"), as tables
reproducing the reviews' cases (review-reliability-649a338.md §6-7):

- a gang member's preemption stops the whole gang: its queue's floor and the final-share
  rule count every member, all members are victims (on every node they run on), and a
  gang is a victim only where no non-gang victim would do;
- the victim floor holds at every level of the tree: in the README's ads/dev tree a leaf
  that uses its idle sibling's share is protected by its parent's guarantee."""

from __future__ import annotations

import random

import numpy as np

from tcluster.domain.resources import Resources
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.preemption import (
    PreemptionInput, PreemptionPlan, PreemptionSettings, WaitingJob, plan_preemption,
)
from tcluster.scheduler.queues import parse_queue_text
from tcluster.scheduler.victims import Blocked, GangMember, RunningTask

NOW = 10_000.0
OLD = NOW - 600
ONE = Resources(cpu=1, memory=0)
FLAT = "queues:\n  a: {weight: 1}\n  b: {weight: 1}\n"
README_TREE = ("queues:\n  ads: {weight: 60, queues: {prod: {weight: 90}, test: {weight: 10}}}\n"
               "  dev: {weight: 40, queues: {prod: {weight: 90}, test: {weight: 10}}}\n")


class World:
    """Nodes of `cpu` cores and 1-core tasks placed on them by hand."""

    def __init__(self, *nodes: str, cpu: float = 4.0) -> None:
        self.matrix = NodeMatrix()
        for name in nodes:
            self.matrix.upsert(name, Resources(cpu=cpu, memory=8 << 30), {}, schedulable=True)
        self.on: dict[str, list[RunningTask]] = {n: [] for n in nodes}
        self.gangs: dict[str, list[GangMember]] = {}
        self.held: dict[str, Resources] = {}

    def run(self, job: str, queue: str, nodes: list[str], started: float = OLD, gang: bool = False) -> None:
        for index, node in enumerate(nodes):
            self.matrix.allocate(node, ONE)
            task = RunningTask(f"{job}.{index}", job, queue, started, np.array([1.0, 0.0]))
            self.on[node].append(task)
            self.held[queue] = self.held.get(queue, Resources()) + ONE
            if gang:
                self.gangs.setdefault(job, []).append(GangMember(node, task))

    def plan(self, queues: str, waiting: list[WaitingJob], **knobs: float) -> PreemptionPlan:
        inp = PreemptionInput(parse_queue_text(queues, "t"), self.matrix.view(), self.held, waiting,
                              lambda n: self.on[n], gangs={j: tuple(m) for j, m in self.gangs.items()})
        since = {leaf: NOW - 3600 for leaf in inp.tree.leaves}
        return plan_preemption(inp, PreemptionSettings(**knobs), since, NOW, random.Random(0))  # type: ignore[arg-type]


def b_waits(n: int = 1, queue: str = "b") -> list[WaitingJob]:
    return [WaitingJob("b-job", queue, ONE, n)]


# ---- gangs ----

def test_review_6_one_gang_member_is_not_a_victim_when_the_whole_gang_breaks_the_floor() -> None:
    """The review's case: a 4-task gang of a fills a 4-core node, b waits with one task.
    Before: one member was the victim (the planner counted a at 0.75) and the gang's
    restart took a to 0.00 against its 0.50. Now the victim would be the whole gang, a
    would fall to 0.00: no victim, and the reason says why."""
    w = World("n1")
    w.run("gang", "a", ["n1"] * 4, gang=True)
    result = w.plan(FLAT, b_waits())
    assert result.victims == ()
    assert result.blocked["b-job"] is Blocked.GANG
    assert "whole gang" in result.notes["b-job"]


def test_a_non_gang_victim_is_preferred_even_when_the_gang_is_younger() -> None:
    """The youngest task goes first, but not a gang member while a plain task would do."""
    w = World("n1")
    w.run("plain", "a", ["n1", "n1"], started=OLD - 100)
    w.run("gang", "a", ["n1", "n1"], started=OLD, gang=True)
    result = w.plan(FLAT, b_waits())
    assert [v.job_id for v in result.victims] == ["plain"]


def test_a_node_with_plain_victims_wins_over_a_cheaper_node_with_a_gang() -> None:
    """n1 holds a young gang (little work lost), n2 old plain tasks: n2 is chosen."""
    w = World("n1", "n2", cpu=2.0)
    w.run("gang", "a", ["n1", "n1"], started=NOW - 100, gang=True)
    w.run("plain", "a", ["n2", "n2"], started=OLD)
    result = w.plan(FLAT, b_waits())
    assert [(v.job_id, v.node) for v in result.victims] == [("plain", "n2")]


def test_a_whole_gang_is_the_victim_on_every_node_and_its_room_is_used() -> None:
    """Plain tasks too young to be victims; the gang (one member on each node) is taken
    whole, a stays at its 0.50, and b's two tasks get the room on both nodes with no
    further victim."""
    w = World("n1", "n2", cpu=2.0)
    w.run("gang", "a", ["n1", "n2"], gang=True)
    w.run("young", "a", ["n1", "n2"], started=NOW - 5)
    result = w.plan(FLAT, b_waits(2))
    assert sorted((v.task_id, v.node) for v in result.victims) == [("gang.0", "n1"), ("gang.1", "n2")]
    assert sorted(c.node for c in result.claims) == ["n1", "n2"]


def test_a_gang_counts_whole_against_the_final_share_rule() -> None:
    """a: a gang of 3 and one plain task on 4 cores, weights 1:1. b waits for 2: the plain
    task goes (a 0.75, b 0.25); the gang would leave b at 0.75 over a at 0.00: refused."""
    w = World("n1")
    w.run("gang", "a", ["n1"] * 3, gang=True)
    w.run("plain", "a", ["n1"], started=NOW - 100)
    result = w.plan(FLAT, b_waits(2))
    assert [v.job_id for v in result.victims] == ["plain"]


def test_a_gang_being_stopped_already_is_not_chosen_again() -> None:
    """The naive policy (no floor) takes the gang for b's first task; its next three find
    the room the gang frees, and no member is a victim twice."""
    w = World("n1", "n2", cpu=2.0)
    w.run("gang", "a", ["n1", "n2", "n1", "n2"], gang=True)
    result = w.plan(FLAT, b_waits(4), victim_floor=False, final_share_rule=False)
    ids = [v.task_id for v in result.victims]
    assert sorted(ids) == ["gang.0", "gang.1", "gang.2", "gang.3"] and len(set(ids)) == 4
    assert len(result.claims) == 2                # b reached its 0.50 on the room freed


# ---- the tree ----

def readme_tree_world() -> World:
    """The review's e8: one 10-core node; ads.test holds 6 (its parent's 0.60), dev.test 4."""
    w = World("n1", cpu=10.0)
    w.run("ads-test", "ads.test", ["n1"] * 6)
    w.run("dev-test", "dev.test", ["n1"] * 4, started=OLD - 50)
    return w


def test_review_7_a_parent_at_its_guarantee_is_not_preempted() -> None:
    """Before: dev.prod took 3 of its 4 victims from ads.test (leaf target 0.06), and ads
    fell to 0.30 against 0.60 while dev rose to 0.70. Now ads is held at its 0.60 and the
    victims come from dev.test, inside dev."""
    w = readme_tree_world()
    result = w.plan(README_TREE, [WaitingJob("dev-prod", "dev.prod", ONE, 4)])
    assert {v.queue for v in result.victims} == {"dev.test"}
    assert len(result.victims) == 3               # dev.test kept at its 0.04 floor: one task


def test_a_parent_above_its_guarantee_still_gives_room() -> None:
    """ads.test holds 8 of 10 (ads 0.80 > 0.60): dev.prod may take two from ads, not three."""
    w = World("n1", cpu=10.0)
    w.run("ads-test", "ads.test", ["n1"] * 8)
    result = w.plan(README_TREE, [WaitingJob("dev-prod", "dev.prod", ONE, 4)])
    assert [v.queue for v in result.victims] == ["ads.test"] * 2


def test_the_final_share_rule_compares_the_sides_under_the_common_parent() -> None:
    """Weights x:1 {p, q} and y:1; one 4-core node. x.q holds 3, y 1 and waits for more.
    At the leaves y (0.25 / 0.5) looks below x.q (0.75 / 0.25), but x and y are the
    siblings: taking from x would leave y at 0.50 over x at 0.50: allowed once, then
    equal standing stops it."""
    tree = "queues:\n  x: {weight: 1, queues: {p: {weight: 1}, q: {weight: 1}}}\n  y: {weight: 1}\n"
    w = World("n1")
    w.run("xq", "x.q", ["n1"] * 3)
    w.run("y0", "y", ["n1"])
    result = w.plan(tree, [WaitingJob("y1", "y", ONE, 3)])
    assert [v.queue for v in result.victims] == ["x.q"]


def test_victims_come_from_the_preemptors_own_subtree_first() -> None:
    """ads (0.70) and dev.test are both over their targets: dev.prod takes from dev.test
    first, then what ads has above its 0.60."""
    w = World("n1", cpu=10.0)
    w.run("ads-test", "ads.test", ["n1"] * 7)
    w.run("dev-test", "dev.test", ["n1"] * 3, started=OLD - 50)
    result = w.plan(README_TREE, [WaitingJob("dev-prod", "dev.prod", ONE, 4)])
    assert [v.queue for v in result.victims] == ["dev.test", "dev.test", "ads.test"]


def test_the_naive_policy_still_ignores_the_floor() -> None:
    w = readme_tree_world()
    result = w.plan(README_TREE, [WaitingJob("dev-prod", "dev.prod", ONE, 4)],
                    victim_floor=False, final_share_rule=False)
    assert len(result.victims) == 4
