"""Preemption: fair shares that hold over time (README, "Preemption").

A queue with pending work is entitled to its target: min(its guaranteed share, the
dominant share of its demand). A queue below its target for `after_s` reclaims room
from queues above theirs: for one waiting task at a time, it picks victims on one node
(scheduler/victims.py), claims that node for the job (the caller holds it, so nothing
else takes the room), and stops once its share, counting the claimed room, reaches the
target. Tasks already being stopped count as gone, and claimed room as the preemptor's,
so a decision is never taken twice for the same need, here or after a master restart.

Pure: the queue tree, the node view, per-queue holdings and the waiting jobs in; the
victims, the claims and the starvation clocks out. `now` and the rng are inputs, so the
simulator and the live master run this same code."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from tcluster.domain.resources import Resources
from tcluster.scheduler.capbook import CapBook
from tcluster.scheduler.lineage import Lineage
from tcluster.scheduler.nodestate import NodeMatrixView, resource_vector
from tcluster.scheduler.queues import QueueTree
from tcluster.scheduler.victims import (
    EPSILON, Blocked, NodeChoice, Placed, RunningTask, Search, Standing, cheapest,
)


@dataclass(frozen=True)
class PreemptionSettings:
    after_s: float = 30.0          # how long a queue stays below its target with work waiting
    grace_s: float = 30.0          # SIGTERM, then SIGKILL after this
    min_runtime_s: float = 60.0    # a younger task is no victim
    max_per_round: int = 10        # victims per round, all queues together
    final_share_rule: bool = True  # False, with victim_floor False: the naive policy (sim)
    victim_floor: bool = True      # never take a victim queue below its own target
    sample_nodes: int = 4          # nodes with a way to make room, compared per task
    max_node_visits: int = 256     # nodes examined per task per round (the rest next round)

    @classmethod
    def naive(cls, **overrides: float) -> PreemptionSettings:
        """Preempt on any share deficit, from any queue holding more, no final-share rule."""
        return cls(final_share_rule=False, victim_floor=False, **overrides)  # type: ignore[arg-type]


@dataclass(frozen=True)
class WaitingJob:
    job_id: str
    queue: str
    request: Resources
    pending: int
    user: str = ""       # for per-user quotas (scheduler/quotas.job_user)


@dataclass(frozen=True)
class Claim:
    """Room on `node` being freed for `count` tasks of `job_id`."""
    job_id: str
    node: str
    count: int = 1


@dataclass(frozen=True)
class Victim:
    task_id: str
    job_id: str
    queue: str
    node: str
    started_at: float
    by_job: str
    by_queue: str
    reason: str


@dataclass(frozen=True)
class PreemptionInput:
    tree: QueueTree
    view: NodeMatrixView
    held: Mapping[str, Resources]                        # per queue: held by tasks not being stopped
    waiting: Sequence[WaitingJob]                        # jobs with pending tasks, in serving order
    running_on: Callable[[str], Iterable[RunningTask]]   # a node's tasks that are not being stopped
    claims: Sequence[Claim] = ()                         # in flight from earlier rounds
    leaving: Mapping[str, Resources] = field(default_factory=dict)   # per node: what stopping tasks free
    held_for: Mapping[str, str] = field(default_factory=dict)        # node -> the job a reservation holds it for
    eligible: Callable[[str], np.ndarray | None] = lambda job_id: None   # rows a job's constraints allow
    caps: CapBook | None = None       # queue quotas: a capped job gains nothing from preemption (mutated)
    gangs: Mapping[str, Sequence[Placed]] = field(default_factory=dict)  # gang job -> running members not stopping


@dataclass(frozen=True)
class PreemptionPlan:
    victims: tuple[Victim, ...] = ()
    claims: tuple[Claim, ...] = ()                       # new this round
    starved_since: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # job -> what preemption does about its wait
    blocked: dict[str, Blocked] = field(default_factory=dict)


def plan_preemption(inp: PreemptionInput, settings: PreemptionSettings, starved_since: Mapping[str, float],
                    now: float, rng: random.Random) -> PreemptionPlan:
    """`starved_since`: the clocks the last plan returned (the caller keeps them)."""
    view = inp.view
    totals = view.capacity[view.schedulable].sum(axis=0) if view.schedulable.any() else np.zeros(len(view.kinds))
    planner = _Planner(inp, settings, totals, now, rng)
    clocks = planner.clocks(starved_since)
    for queue in planner.ready(clocks):
        planner.reclaim(queue)
    planner.note_claims()
    return PreemptionPlan(tuple(planner.victims), tuple(planner.new_claims), clocks, planner.notes, planner.blocked)


class _Planner:
    def __init__(self, inp: PreemptionInput, settings: PreemptionSettings, totals: np.ndarray, now: float,
                 rng: random.Random) -> None:
        self.inp, self.settings, self.now, self.rng = inp, settings, now, rng
        self._inverse = np.divide(1.0, totals, out=np.zeros_like(totals, dtype=float), where=totals > 0)
        self.kinds = inp.view.kinds
        self.requests = {j.job_id: self.vector(j.request) for j in inp.waiting}
        self.claimed = _claimed_counts(inp.claims)
        self.claimed_on = self._claimed_on_nodes()
        # A held or claimed node serves one job: no other job's victims are chosen there.
        self.owner = {**inp.held_for, **{c.node: c.job_id for c in inp.claims}}
        self.chosen: set[str] = set()                         # victims of this round so far
        self.lineage = Lineage(inp.tree)
        self._fits: dict[str, np.ndarray] = {}                # job -> nodes it fits when empty
        # One random start a round, for every search: the jobs of a round look at the same
        # nodes first, so a node's tasks are asked for once (the input does not change while
        # the round plans) and a round examines about max_node_visits nodes, not that many
        # per starved job (the worst case: no victim anywhere).
        self._spin: float | None = None
        self._tasks: dict[str, list[RunningTask]] = {}
        self.freed_on: dict[str, np.ndarray] = {}             # what they free, per node
        self.standings = self._standings()
        self.budget = settings.max_per_round
        self.victims: list[Victim] = []
        self.new_claims: list[Claim] = []
        self.notes: dict[str, str] = {}
        self.blocked: dict[str, Blocked] = {}
        self.shares_before = {q: self.share(s.usage) for q, s in self.standings.items()}
        self.gangs = {job: tuple(members) for job, members in inp.gangs.items()}
        self.caps = inp.caps
        if self.caps is not None:   # room claimed in earlier rounds is the claimant's already
            by_id = {j.job_id: j for j in inp.waiting}
            for claim in inp.claims:
                if claim.job_id in by_id:
                    job = by_id[claim.job_id]
                    self.caps.add(job.queue, job.user, job.request, claim.count)

    def capped(self, job: WaitingJob) -> bool:
        """Its queue or user is at a quota: preempting for it would free room it may not use."""
        return self.caps is not None and self.caps.blocks(job.queue, job.user, job.request) is not None

    def vector(self, resources: Resources) -> np.ndarray:
        return resource_vector(resources, self.kinds)

    def share(self, usage: np.ndarray) -> float:
        # max(..., 0.0) as np.max(initial=0.0) did, without its wrapper's cost (a hot path)
        return max(float((usage * self._inverse).max()), 0.0) if len(self._inverse) else 0.0

    # ---- who is entitled to what ----

    def _standings(self) -> dict[str, Standing]:
        """Per queue at every level of the tree (a parent sums its children): held +
        claimed, and the target min(guarantee, the share of its demand)."""
        usage: dict[str, np.ndarray] = {q: self.vector(r) for q, r in self.inp.held.items()}
        demand = {q: v.copy() for q, v in usage.items()}
        zero = np.zeros(len(self.kinds))
        for job in self.inp.waiting:
            claimed = self.claimed.get(job.job_id, 0)
            request = self.requests[job.job_id]
            usage[job.queue] = usage.get(job.queue, zero) + request * claimed
            demand[job.queue] = demand.get(job.queue, zero) + request * max(job.pending, claimed)
        tree = self.inp.tree
        totals: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for queue in list(usage):
            for level in self.lineage.up(queue):
                held, asked = totals.get(level, (zero, zero))
                totals[level] = (held + usage[queue], asked + demand[queue])
        standings = {}
        for queue, (held, asked) in totals.items():
            guarantee = tree.guaranteed_share(queue) if tree.node(queue) is not None else 0.0
            target = min(guarantee, self.share(asked))
            standings[queue] = Standing(held, target, guarantee, not tree.preemptable(queue))
        return standings

    def _charge(self, queue: str, amount: np.ndarray) -> None:
        """A change of what `queue` holds, and so each of its parents."""
        for level in self.lineage.up(queue):
            standing = self.standings[level]
            standing.usage = standing.usage + amount

    def starved(self) -> list[str]:
        waiting = {j.queue for j in self.inp.waiting
                   if j.pending > self.claimed.get(j.job_id, 0) and not self.capped(j)}
        return sorted(q for q in waiting if self.share(self.standings[q].usage) < self.standings[q].target - EPSILON)

    def clocks(self, since: Mapping[str, float]) -> dict[str, float]:
        """A queue's clock runs while it is starved and restarts once it reaches its target."""
        return {q: since.get(q, self.now) for q in self.starved()}

    def ready(self, clocks: dict[str, float]) -> list[str]:
        """Starved queues whose delay is over, the most deprived first; the others get a note."""
        ready = []
        for queue, since in clocks.items():
            left = self.settings.after_s - (self.now - since)
            if left > 0:
                self._note_queue(queue, f"reclaim from queues above their share starts in {left:.0f}s")
            else:
                ready.append(queue)
        return sorted(ready, key=lambda q: (self._standing_ratio(q), q))

    def _standing_ratio(self, queue: str) -> float:
        s = self.standings[queue]
        return self.share(s.usage) / s.target if s.target > 0 else 1.0

    # ---- reclaiming ----

    def reclaim(self, queue: str) -> None:
        for job in (j for j in self.inp.waiting if j.queue == queue):
            while self._wants_more(job):
                if self.budget <= 0:
                    self._block(job, Blocked.RATE_LIMIT)
                    return
                choice, blocked = self._find(job)
                if choice is None:
                    self._block(job, blocked)
                    break
                self._take(job, choice)
            if not self._below_target(queue):
                return

    def _wants_more(self, job: WaitingJob) -> bool:
        return job.pending > self.claimed.get(job.job_id, 0) and self._below_target(job.queue) and not self.capped(job)

    def _below_target(self, queue: str) -> bool:
        s = self.standings[queue]
        return self.share(s.usage) < s.target - EPSILON

    def _find(self, job: WaitingJob) -> tuple[NodeChoice | None, Blocked]:
        request = self.requests[job.job_id]
        search = Search(job.queue, request, self.standings, self.share, self.now, self.settings.min_runtime_s,
                        self.settings.final_share_rule, self.settings.victim_floor, self.lineage, self.gangs)
        choices: list[NodeChoice] = []
        without_gangs = 0
        for row in self._rows(job, request):
            name = self.inp.view.names[row]
            assert name is not None
            tasks = [t for t in self._running_on(name) if t.task_id not in self.chosen]
            choice = search.on_node(name, self._room(name, row), tasks)
            if choice is not None and not choice.victims:
                return choice, Blocked.NO_FIT        # room is already there (or on its way)
            if choice is not None:
                choices.append(choice)
                without_gangs += not choice.gangs    # a gang is a victim only where no other would do:
                if without_gangs >= self.settings.sample_nodes:   # look on while only gangs were found
                    break
        # A node claimed for this job already, if it still has victims: a node serves one
        # job, so spreading one job's claims over many nodes would lock other starved
        # queues out of the victims left on them (the sim's property test found this).
        own = [c for c in choices if self.owner.get(c.node) == job.job_id]
        return cheapest(own or choices), search.blocked()

    def _rows(self, job: WaitingJob, request: np.ndarray) -> list[int]:
        """Nodes that could hold the task when empty, in name order from the round's random
        start (wrapping), at most max_node_visits; the nodes claimed for the job first. The filter and the rotation
        are numpy's: only the rows to visit become Python ints (10,000 nodes: ~0.1 ms)."""
        view = self.inp.view
        ok = self._fits_empty(job, request).copy()
        owned = [(view.rows.get(name), owner == job.job_id) for name, owner in self.owner.items()]
        for row, mine in owned:
            if row is not None and not mine:
                ok[row] = False
        rows = view.order[ok[view.order]]
        if not len(rows):
            return []
        if self._spin is None:
            self._spin = self.rng.random()
        start, limit = min(int(self._spin * len(rows)), len(rows) - 1), self.settings.max_node_visits
        wrapped = np.concatenate((rows[start:start + limit], rows[:max(0, start + limit - len(rows))]))
        visit: list[int] = wrapped.tolist()
        own = [row for row, mine in owned if mine and row is not None and ok[row]]
        if own:   # visited first (see _find)
            taken = set(own)
            visit = own + [r for r in visit if r not in taken][: max(0, limit - len(own))]
        return visit[:limit]

    def _running_on(self, name: str) -> list[RunningTask]:
        found = self._tasks.get(name)
        if found is None:
            found = self._tasks[name] = list(self.inp.running_on(name))
        return found

    def _fits_empty(self, job: WaitingJob, request: np.ndarray) -> np.ndarray:
        """Schedulable, allowed by the job's constraints, big enough when empty: the same
        all round, so worked out once per job (a (nodes, kinds) compare: ~0.2 ms at 10,000)."""
        found = self._fits.get(job.job_id)
        if found is None:
            view = self.inp.view
            found = view.schedulable.copy()
            eligible = self.inp.eligible(job.job_id)
            if eligible is not None:
                found &= eligible
            for kind, need in enumerate((request - EPSILON).tolist()):   # per column: 10x np.all(axis=1)
                found &= view.capacity[:, kind] >= need
            self._fits[job.job_id] = found
        return found

    def _room(self, name: str, row: int) -> np.ndarray:
        """Free now, plus what tasks being stopped will free, minus what is claimed already.
        (Only the terms a node has: this runs for every node visited.)"""
        room: np.ndarray = self.inp.view.free[row]
        leaving = self.inp.leaving.get(name)
        if leaving is not None:
            room = room + self.vector(leaving)
        freed = self.freed_on.get(name)
        if freed is not None:
            room = room + freed
        claimed = self.claimed_on.get(name)
        return room if claimed is None else room - claimed

    def _take(self, job: WaitingJob, choice: NodeChoice) -> None:
        request = self.requests[job.job_id]
        reason = self._victim_reason(job)
        for node, task in choice.victims:     # a gang's members free their room on their own nodes
            self._charge(task.queue, -task.demand)
            self.chosen.add(task.task_id)
            self.freed_on[node] = self.freed_on.get(node, 0.0) + task.demand
            self.victims.append(Victim(task.task_id, task.job_id, task.queue, node, task.started_at,
                                       job.job_id, job.queue, reason))
            self.budget -= 1
        self.gangs = {j: m for j, m in self.gangs.items() if m[0].task.task_id not in self.chosen}
        self._charge(job.queue, request)
        if self.caps is not None:
            self.caps.add(job.queue, job.user, job.request)
        self.claimed[job.job_id] = self.claimed.get(job.job_id, 0) + 1
        self.claimed_on[choice.node] = self.claimed_on.get(choice.node, 0.0) + request
        self.new_claims.append(Claim(job.job_id, choice.node))
        self.owner[choice.node] = job.job_id
        self.notes[job.job_id] = f"{self._deficit(job.queue)}: {_stopping(choice)} for it"

    def _victim_reason(self, job: WaitingJob) -> str:
        s = self.standings[job.queue]
        return (f"Preempted by job {job.job_id} (queue {job.queue} below its share: "
                f"{self.shares_before[job.queue]:.2f} < {s.target:.2f})")

    def _deficit(self, queue: str) -> str:
        return f"queue {queue} below its share ({self.shares_before[queue]:.2f} < {self.standings[queue].target:.2f})"

    def _note_queue(self, queue: str, text: str) -> None:
        for job in self.inp.waiting:
            if job.queue == queue and job.pending > self.claimed.get(job.job_id, 0) and not self.capped(job):
                self.notes[job.job_id] = f"{self._deficit(queue)}: {text}"

    def _block(self, job: WaitingJob, why: Blocked) -> None:
        self.blocked[job.job_id] = why
        if any(c.job_id == job.job_id for c in self.new_claims):   # it got room this round; not all it asks
            self.notes[job.job_id] += f"; for more: {explain(why, self.settings)}"
            return
        self.notes[job.job_id] = f"{self._deficit(job.queue)}, but nothing can be reclaimed: {explain(why, self.settings)}"

    def note_claims(self) -> None:
        for claim in self.inp.claims:
            if claim.job_id not in self.notes:
                self.notes[claim.job_id] = f"room on node {claim.node} is being freed for it (preemption)"

    def _claimed_on_nodes(self) -> dict[str, np.ndarray]:
        on: dict[str, np.ndarray] = {}
        requests = {j.job_id: self.requests[j.job_id] for j in self.inp.waiting}
        for claim in self.inp.claims:
            request = requests.get(claim.job_id)
            if request is not None:
                on[claim.node] = on.get(claim.node, 0.0) + request * claim.count
        return on


def _stopping(choice: NodeChoice) -> str:
    if not choice.victims:
        return f"room being freed on node {choice.node}"
    others = sorted({node for node, _ in choice.victims} - {choice.node})
    gangs = f" (whole gangs, also on {', '.join(others)})" if others else " (whole gangs)" if choice.gangs else ""
    return f"stopping {len(choice.victims)} task(s){gangs} on node {choice.node}"


def _claimed_counts(claims: Sequence[Claim]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for claim in claims:
        counts[claim.job_id] = counts.get(claim.job_id, 0) + claim.count
    return counts


def explain(why: Blocked, settings: PreemptionSettings) -> str:
    return {
        Blocked.EXEMPT: f"the tasks that could make room have run less than --preempt-min-runtime-s "
                        f"({settings.min_runtime_s:.0f}s)",
        Blocked.PROTECTED: "the queues holding the room are protected (preemptable: false)",
        Blocked.FINAL_SHARE: "taking more would leave this queue ahead of the queues it would take from",
        Blocked.AT_TARGET: "every other queue holds no more than its own share",
        Blocked.RATE_LIMIT: f"this round's preemption limit ({settings.max_per_round}) is reached; more next round",
        Blocked.NO_FIT: "no node where stopping tasks of queues above their share makes room for one task",
        Blocked.GANG: "only gangs could make room, and stopping a whole gang would take its queue below its "
                      "share or leave this queue ahead of it",
    }[why]
