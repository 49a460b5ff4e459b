"""`tcl sim --preemption`: the live master's preemption planner (scheduler/preemption.py)
run by the simulator after each round, as master/features/preempting.py runs it after the
master's.

The planner's input is built from the simulator's state the way master/features/preempting.py
builds it from the master's: per queue what tasks hold that are not being stopped,
the jobs with waiting tasks, each node's running tasks with their start times, the
claims in the simulator's reservations, and per node what victims in their grace will
free. The plan is carried out as the master does: each victim keeps its room until
now + grace_s (an event), then its task is requeued; each claim holds its node in the
reservations. The rng is seeded, so a run is the same for a seed.

The master runs a round every second; the simulator only at events, so it wakes
itself (a tick) when the plan says something will change with time alone: a
starvation clock runs out, a rate limit lets more through next round, or tasks that
were too young to be victims grow old enough.

Without settings it only records each queue's share and target over time (for
`--preempt-compare`'s system without preemption)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

import numpy as np

from tcluster.domain.constraints import parse_constraints
from tcluster.domain.model import node_requirements
from tcluster.domain.resources import Resources
from tcluster.scheduler.nodestate import resource_vector
from tcluster.scheduler.capbook import Holding, has_caps, make_capbook
from tcluster.scheduler.quotas import job_user
from tcluster.scheduler.preemption import (
    Claim, PreemptionInput, PreemptionPlan, PreemptionSettings, Victim, WaitingJob, plan_preemption,
)
from tcluster.scheduler.round import eligible_rows
from tcluster.scheduler.victims import Blocked, Placed, RunningTask

if TYPE_CHECKING:
    from tcluster.scheduler.matching import EligibleCache
    from tcluster.scheduler.nodestate import NodeMatrix
    from tcluster.scheduler.reservations import Reservations
    from tcluster.sim.jobs import JobTrack
    from tcluster.sim.scenario import Scenario

TICK_S = 1.0   # the master's --schedule-interval-s: a rate-limited reclaim goes on a round later


@dataclass(frozen=True)
class Preempted:
    """One victim, once its room was freed (or it finished on its own within its grace)."""
    job: str
    task: int
    attempt: int
    queue: str
    node: str
    started_at: float
    decided_at: float
    by_job: str
    by_queue: str
    ended_at: float
    lost_cpu_s: float           # (ended_at - started_at) x its cpu request; 0 if it finished on its own


@dataclass(frozen=True)
class QueuePoint:
    """A leaf queue after a round: its dominant share, its target min(guarantee, demand)."""
    share: float
    target: float
    waiting: bool               # it has tasks waiting


Observer = Callable[[float, PreemptionInput, PreemptionPlan], None]


class Simulated(Protocol):
    """What the planner reads of the simulator (sim/engine.py's Simulator) and asks of it."""
    scenario: Scenario
    matrix: NodeMatrix
    cache: EligibleCache
    book: Reservations
    tracks: dict[str, JobTrack]
    on_node: dict[str, dict[tuple[str, int], None]]
    live: int                   # events still to come that are not ticks
    until: float | None

    def preempt(self, name: str, index: int, release_at: float) -> None: ...

    def tick(self, at: float) -> None: ...

    def holdings(self) -> list[Holding]: ...


class SimPreemption:
    def __init__(self, sim: Simulated, settings: PreemptionSettings | None, seed: int) -> None:
        self.sim, self.settings = sim, settings
        self.rng = random.Random(seed)      # the planner's own: placement's stream stays as without it
        self.starved_since: dict[str, float] = {}
        self.decided: dict[tuple[str, int], tuple[Victim, float]] = {}
        self.log: list[Preempted] = []
        self.decisions: list[tuple[float, str, int, str, str]] = []   # (time, job, task, queue, by queue)
        self.observer: Observer | None = None   # tests see every plan with its input
        tree = sim.scenario.queues
        self.queues = tree.leaves
        self._guarantee = np.array([tree.guaranteed_share(q) for q in self.queues])
        self._index = {q: i for i, q in enumerate(self.queues)}
        view = sim.matrix.view()
        self.kinds = view.kinds
        totals = view.capacity[view.schedulable].sum(axis=0)
        inverse = np.divide(1.0, totals, out=np.zeros_like(totals, dtype=float), where=totals > 0)
        self._demand = {j.name: resource_vector(j.resources, view.kinds) for j in sim.scenario.jobs}
        self._unit = {name: vector * inverse for name, vector in self._demand.items()}
        self.timeline: list[tuple[float, tuple[QueuePoint, ...]]] = []
        self._next_tick = -1.0

    # ---- the plan ----

    def after_round(self, now: float) -> None:
        if self.settings is None:
            return
        if not any(track.pending for track in self.sim.tracks.values()):
            self.starved_since = {}    # nobody waits: every clock stops
            return
        inp = self.planner_input(now)
        plan = plan_preemption(inp, self.settings, self.starved_since, now, self.rng)
        self.starved_since = plan.starved_since
        if self.observer is not None:
            self.observer(now, inp, plan)
        for victim in plan.victims:
            job, _, index = victim.task_id.rpartition(".")
            self.decided[(job, int(index))] = (victim, now)
            self.decisions.append((now, job, int(index), victim.queue, victim.by_queue))
            self.sim.preempt(job, int(index), now + self.settings.grace_s)
        for claim in plan.claims:
            self.sim.book.claim(claim.job_id, claim.node, now)
        self._wake(plan, now)

    def planner_input(self, now: float) -> PreemptionInput:
        sim = self.sim
        held: dict[str, Resources] = {}
        leaving: dict[str, Resources] = {}
        waiting = []
        for name, track in sim.tracks.items():
            resources, queue = track.spec.resources, track.spec.queue
            staying = len(track.running) - len(track.leaving)
            if staying:
                held[queue] = held.get(queue, Resources()) + resources.times(staying)
            for index in sorted(track.leaving):
                node = track.running[index].node
                leaving[node] = leaving.get(node, Resources()) + resources
            if track.pending:
                waiting.append(WaitingJob(name, queue, resources, track.pending, job_user(track.job.spec)))
        claims = [Claim(job, node, count) for job, node, count in sim.book.claims()]
        tree = sim.scenario.queues
        caps = make_capbook(tree, sim.holdings(), sim.matrix.total_capacity()) if has_caps(tree) else None
        return PreemptionInput(tree, sim.matrix.view(), held, waiting, self._running_on, claims,
                               leaving, sim.book.holders(), self._eligible, caps=caps, gangs=self._gangs())

    def _gangs(self) -> dict[str, tuple[Placed, ...]]:
        """Per gang job, its running members that are not leaving: a victim gang goes whole."""
        gangs = {}
        for name, track in self.sim.tracks.items():
            if track.spec.batch.gang and len(track.running) > len(track.leaving):
                gangs[name] = tuple(Placed(task.node, self._task(name, index)) for index, task in
                                    sorted(track.running.items()) if index not in track.leaving)
        return gangs

    def _task(self, name: str, index: int) -> RunningTask:
        track = self.sim.tracks[name]
        return RunningTask(f"{name}.{index}", name, track.spec.queue, track.running[index].started_at,
                           self._demand[name])

    def _running_on(self, node: str) -> Iterator[RunningTask]:
        for name, index in self.sim.on_node.get(node, ()):
            track = self.sim.tracks[name]
            if index not in track.leaving:
                yield self._task(name, index)

    def _eligible(self, job_id: str) -> np.ndarray | None:
        spec = self.sim.tracks[job_id].job.spec
        return eligible_rows(spec, parse_constraints(node_requirements(spec)), self.sim.matrix, self.sim.cache)

    def _wake(self, plan: PreemptionPlan, now: float) -> None:
        """A tick when time alone changes the plan: a clock runs out, the rate limit lets
        more through, too-young tasks grow old enough, or nodes not visited this round."""
        assert self.settings is not None
        times = [since + self.settings.after_s for since in plan.starved_since.values()]
        reasons = set(plan.blocked.values())
        if Blocked.RATE_LIMIT in reasons:
            times.append(now + TICK_S)
        if Blocked.EXEMPT in reasons:
            times.append(self._next_of_age(now))
        if Blocked.NO_FIT in reasons and len(self.sim.on_node) > self.settings.max_node_visits \
                and (self.sim.live or self.sim.until is not None):   # other nodes next round, while time runs
            times.append(now + TICK_S)
        later = [t for t in times if t > now]
        if not later:
            return
        at = min(later)
        if now < self._next_tick <= at:
            return          # an earlier wake-up is set; the plan then sets the next
        self._next_tick = at
        self.sim.tick(at)

    def _next_of_age(self, now: float) -> float:
        assert self.settings is not None
        ages = (task.started_at + self.settings.min_runtime_s for track in self.sim.tracks.values()
                for index, task in track.running.items() if index not in track.leaving)
        return min((t for t in ages if t > now), default=now)

    def released(self, track: JobTrack, index: int, now: float, lost: bool) -> None:
        """A victim's room is free: at the end of its grace (lost work) or its own end."""
        victim, decided_at = self.decided.pop((track.spec.name, index))
        task = track.running[index]
        cpu_s = (now - task.started_at) * track.spec.resources.cpu if lost else 0.0
        self.log.append(Preempted(track.spec.name, index, task.attempt, track.spec.queue, task.node,
                                  task.started_at, decided_at, victim.by_job, victim.by_queue, now, cpu_s))

    # ---- what the report shows ----

    def sample(self, now: float, force: bool = False) -> None:
        points = self.standings()
        if self.timeline and self.timeline[-1][0] == now:
            self.timeline[-1] = (now, points)
        elif force or not self.timeline or self.timeline[-1][1] != points:
            self.timeline.append((now, points))   # a step function: only changes

    def standings(self) -> tuple[QueuePoint, ...]:
        """Per leaf queue: the share its tasks hold (victims in their grace too: they
        hold the room) and min(guarantee, the share of running plus waiting tasks)."""
        held = np.zeros((len(self.queues), len(self.kinds)))
        demand = np.zeros_like(held)
        waiting = [False] * len(self.queues)
        for name, track in self.sim.tracks.items():
            row = self._index.get(track.spec.queue, 0)
            held[row] += self._unit[name] * len(track.running)
            demand[row] += self._unit[name] * (len(track.running) + track.pending)
            waiting[row] |= track.pending > 0
        shares = held.max(axis=1, initial=0.0)
        targets = np.minimum(self._guarantee, demand.max(axis=1, initial=0.0))
        return tuple(QueuePoint(round(float(s), 12), round(float(t), 12), w)
                     for s, t, w in zip(shares, targets, waiting))

