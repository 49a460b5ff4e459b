"""The discrete-event simulator: job submissions and task ends are events on a heap. At
each event time the simulator applies every event due, then runs one scheduling round.
That round is the master's own `schedule_round`, with the same fairness and placement
registries, the same NodeMatrix, reservations and queue tree. There is no sleeping and
no threads: the clock jumps from event to event.

A round only sees the pending tasks that could possibly fit, at most as many as the
free total allows plus one. This keeps a round O(running tasks) and not O(all tasks).
The decisions are the same, because a job can never place more tasks than that in
one round.

With preemption on (sim/preempting.py) the planner of the live master runs after each
round; a victim keeps its room until its grace ends (an event), then its task is
requeued in its job and later starts again from the beginning.

Batch work (sim/batch.py): an array's indexes go to the round as the master's Job.unplaced
with its throttle; a job with a dependency is held until the jobs it names end; a gang
and a time limit are the JobSpec's."""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from tcluster.scheduler.capbook import Holding, has_caps
from tcluster.scheduler.quotas import job_user
from tcluster.scheduler.backfill import RunningEnds, latest_end
from tcluster.scheduler.round import schedule_round
from tcluster.scheduler.decay import DecayLedger, accrue, ledger_keys, usage_weights
from tcluster.scheduler.queues import QueueTree
from tcluster.scheduler.usershare import held_of
from tcluster.domain.model import Job, JobSpec, Task, TaskState
from tcluster.domain.resources import Resources
from tcluster.scheduler.fairness import make_fairness
from tcluster.scheduler.matching import EligibleCache
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import make_placement
from tcluster.scheduler.reservations import PREEMPT_HOLD_SLACK_S, Reservations
from tcluster.scheduler.preemption import PreemptionSettings
from tcluster.sim.batch import TIME_LIMIT, Dependencies, run_for
from tcluster.sim.clock import EventHeap
from tcluster.sim.jobs import JobTrack, TaskRun
from tcluster.sim.scenario import Scenario

if TYPE_CHECKING:
    from tcluster.sim.preempting import SimPreemption

# At equal times: submissions, then task ends, then victims whose grace is over, all
# before the round. A tick only wakes the round (a starvation clock or a rate limit).
_SUBMIT, _END, _RELEASE, _TICK = 0, 1, 2, 3


@dataclass(frozen=True)
class LotesOptions:
    """`--placement lotes` in the simulator: classes from a file, or k-means over the jobs."""
    classes: tuple = ()
    k: int = 4
    config_label: str | None = None


@dataclass(frozen=True)
class SimRun:
    """Everything the report needs, taken when the run ended."""
    end: float
    tracks: tuple[JobTrack, ...]           # submitted jobs, in scenario order
    matrix: NodeMatrix
    capacity: Resources
    counters: dict[str, int]
    timeline: tuple[tuple[float, tuple[float, ...]], ...]   # (time, share per scenario job)
    lotes: dict | None = None              # the plan LoTES followed, or why it fell back
    preemption: SimPreemption | None = None   # its log and the queues' shares over time, when asked for


class Simulator:
    def __init__(self, scenario: Scenario, fairness: str, placement: str, seed: int = 0,
                 lotes: LotesOptions | None = None, preemption: PreemptionSettings | None = None,
                 record_queues: bool = False) -> None:
        self.scenario = scenario
        self.fairness, self.placement = make_fairness(fairness), make_placement(placement)
        self.rng = random.Random(seed)
        self.matrix = NodeMatrix()
        for node in scenario.nodes:
            self.matrix.upsert(node.name, node.capacity, dict(node.labels), schedulable=True)
        self.lotes_book = getattr(self.placement, "book", None)   # the LoTES policy's targets and counts
        self.lotes = self._plan_lotes(lotes or LotesOptions(), seed) if self.lotes_book is not None else None
        self.capacity = self.matrix.total_capacity()
        self.cache = EligibleCache()
        self.tracks: dict[str, JobTrack] = {}
        self.events: EventHeap[tuple[str, int, int]] = EventHeap()   # kind: (job, task, attempt)
        self.live = 0            # events on the heap that are not ticks
        self.until: float | None = None
        self.counters = {"events": 0, "rounds": 0, "tasks_placed": 0, "tasks_done": 0}
        self.on_node: dict[str, dict[tuple[str, int], None]] = {n.name: {} for n in scenario.nodes}
        self.preemption: SimPreemption | None = None
        claim_for = float("inf")
        if preemption is not None or record_queues:
            from tcluster.sim.preempting import SimPreemption   # the planner only when asked for

            self.preemption = SimPreemption(self, preemption, seed)
            if preemption is not None:   # as the master: a claim outlives its victims' grace by the slack
                claim_for = preemption.grace_s + PREEMPT_HOLD_SLACK_S
                self.counters.update(preemptions=0, tasks_requeued=0)
        self.book = Reservations(scenario.reserve_after_s, claim_for)
        if any(j.batch.used for j in scenario.jobs):
            self.counters.update(tasks_failed=0, jobs_cancelled=0)
        self.dependencies = Dependencies(scenario.jobs, self.tracks, self.counters)
        self.timeline: list[tuple[float, tuple[float, ...]]] = []
        self.ledger = DecayLedger()            # decayed usage, with scenario.usage_half_life_s
        self._tree = scenario.queues
        self._held_keys: dict[str, Resources] = {}
        self._mu = {j.name: j.resources.dominant_share(self.capacity) for j in scenario.jobs}

    def _plan_lotes(self, options: LotesOptions, seed: int) -> dict:
        """What the master does off its event loop: classes (file or learned), then stages 1-2."""
        from tcluster.scheduler.lotes.classes import learn_classes
        from tcluster.scheduler.lotes.resolve import plan_for

        kinds = tuple(self.matrix.kinds)
        nodes = [(n.name, n.capacity, dict(n.labels)) for n in self.scenario.nodes]
        classes = options.classes
        if not classes:   # k-means over the tasks the scenario will submit (one point per task, capped per job)
            view = self.matrix.view()
            points = [view.request_vector(j.resources) for j in self.scenario.jobs for _ in range(min(j.tasks, 100))]
            classes = learn_classes([p for p in points if p is not None], view.scale, options.k, random.Random(seed))
        outcome = plan_for(nodes, kinds, classes, options.config_label)
        if outcome.plan is None:
            self.lotes_book.drop(outcome.reason)
            return {"plan": False, "reason": outcome.reason}
        self.lotes_book.adopt(outcome.plan)
        plan = outcome.plan
        return {"plan": True, "classes": [c.name for c in plan.problem.classes], "lambda1": plan.lambda1,
                "lambda2": plan.lambda2, "notes": list(plan.notes)}

    def _classify(self, resources: Resources) -> int | None:
        vector = self.matrix.view().request_vector(resources)
        return None if vector is None or self.lotes_book is None else self.lotes_book.classify(vector)

    def run(self, until: float | None = None) -> SimRun:
        self.until = until
        for job in self.scenario.jobs:
            self.push(job.submit, _SUBMIT, job.name)
        now = 0.0
        while self.events and (until is None or self.events.peek() <= until):
            now = self.events.peek()
            while self.events and self.events.peek() == now:
                self._apply(*self.events.pop(), now)
            self._round(now)
            if self.preemption is not None:
                self.preemption.after_round(now)
            self._sample(now)
        end = now if until is None else until
        self._sample(end, force=True)   # the last row is the state the report gives
        self.dependencies.refresh()
        tracks = tuple(self.tracks[j.name] for j in self.scenario.jobs if j.name in self.tracks)
        return SimRun(end, tracks, self.matrix, self.capacity, dict(self.counters), tuple(self.timeline), self.lotes,
                      self.preemption)

    def push(self, time: float, kind: int, name: str = "", index: int = -1, attempt: int = 0) -> None:
        self.live += kind != _TICK
        self.events.push(time, kind, (name, index, attempt))

    def _apply(self, kind: int, event: tuple[str, int, int], now: float) -> None:
        name, index, attempt = event
        if kind == _TICK:
            return          # only wakes the round: not counted as an event
        self.live -= 1
        self.counters["events"] += 1
        if kind == _SUBMIT:
            self._submit(name, now)
        elif kind == _END:
            self._end(name, index, attempt, now)
        else:
            self._release(name, index, attempt, now)

    def _submit(self, name: str, now: float) -> None:
        spec = next(j for j in self.scenario.jobs if j.name == name)
        b = spec.batch
        job_spec = JobSpec(("sim",), spec.resources, name=name, queue=spec.queue, tasks=spec.tasks,
                           constraints=spec.constraints, weight=spec.weight, time_limit_s=b.time_limit_s,
                           array=b.array, dependency=b.dependency, keep_unmet=b.keep_unmet, gang=b.gang,
                           owner=spec.user, user=spec.user)
        job = Job(name, job_spec, submitted_at=now, unplaced=b.indexes, throttle=b.throttle)
        waiting = deque() if b.array else deque(range(spec.tasks))   # an array's wait as ranges
        self.tracks[name] = track = JobTrack(spec, job, waiting, unplaced=b.indexes)
        self.dependencies.resolve(track, now)   # its predecessors may have ended already

    def _end(self, name: str, index: int, attempt: int, now: float) -> None:
        track = self.tracks[name]
        task = track.running.get(index)
        if task is None or task.attempt != attempt:
            return          # that attempt was preempted: its end never comes
        if index in track.leaving and self.preemption is not None:
            self.preemption.released(track, index, now, lost=False)   # it finished within its grace
        run = self._stop(track, index, now)
        if run_for(track.spec.duration, track.spec.batch.time_limit_s)[1]:
            run.reason = TIME_LIMIT
            track.failed += 1
            self.counters["tasks_failed"] += 1
        else:
            track.done += 1
            self.counters["tasks_done"] += 1
        if track.done + track.failed == track.spec.tasks:
            track.ended_at = now
            self.dependencies.ended(track, now)

    def _release(self, name: str, index: int, attempt: int, now: float) -> None:
        """A victim's grace is over: its room is free and its task waits again."""
        track = self.tracks[name]
        task = track.running.get(index)
        if task is None or task.attempt != attempt or index not in track.leaving:
            return          # it finished on its own within its grace
        if self.preemption is not None:
            self.preemption.released(track, index, now, lost=True)
        self._stop(track, index, now).preempted = True
        track.waiting.appendleft(index)
        self.counters["tasks_requeued"] += 1

    def _stop(self, track: JobTrack, index: int, now: float) -> TaskRun:
        task = track.running.pop(index)
        track.leaving.discard(index)
        del self.on_node[task.node][(track.spec.name, index)]
        self.matrix.release(task.node, track.spec.resources)
        if (k := self._classify(track.spec.resources)) is not None:
            self.lotes_book.ended(task.node, k)
        run = next(r for r in reversed(track.runs) if r.task == index)
        run.end = now
        return run

    def preempt(self, name: str, index: int, release_at: float) -> None:
        """The planner chose this task: it holds its room until `release_at` (its grace)."""
        track = self.tracks[name]
        track.leaving.add(index)
        self.counters["preemptions"] += 1
        self.push(release_at, _RELEASE, name, index, track.running[index].attempt)

    def tick(self, at: float) -> None:
        self.push(at, _TICK)

    def _round(self, now: float) -> None:
        jobs, tasks = self._round_input()
        if not jobs:
            return
        self.counters["rounds"] += 1
        held = held_of((t.spec.queue, t.spec.user, t.spec.resources, len(t.running)) for t in self.tracks.values())
        result = schedule_round(jobs, tasks, self.matrix, self.fairness, self.placement, self.rng, self.cache,
                                queues=self._fair_tree(now), reservations=self.book, now=now, held=held,
                                holdings=self.holdings() if has_caps(self.scenario.queues) else (),
                                caps_tree=self.scenario.queues,
                                running_ends=self._running_ends(now) if self.scenario.backfill else None)
        self.book = result.holds or self.book
        for job_id, holder in result.backfilled.items():
            self.tracks[job_id].backfilled_before = holder
            self.counters["jobs_backfilled"] = self.counters.get("jobs_backfilled", 0) + 1
        for holder, estimate in result.estimates.items():
            track = self.tracks[holder]
            if estimate is not None:
                track.estimate = estimate if track.estimate is None else min(track.estimate, estimate)
        for holder in set(self.book.holders().values()):
            track = self.tracks[holder]
            track.held_since = now if track.held_since is None else track.held_since
        for task, node in result.placements:
            self._start(self.tracks[task.job_id], task.index, node, now)
        if self.scenario.usage_half_life_s:   # held from now until the next round: what it accrues
            self._held_keys = ledger_keys(self.scenario.queues, held_of(
                (t.spec.queue, t.spec.user or f"#{t.spec.name}", t.spec.resources, len(t.running))
                for t in self.tracks.values()))

    def _fair_tree(self, now: float) -> QueueTree:
        """The tree the fairness round sees: with a half-life, its weights follow past usage
        (scheduler/decay.py), accrued from what was held since the last round."""
        half_life = self.scenario.usage_half_life_s
        if not half_life:
            return self.scenario.queues
        self.ledger = accrue(self.ledger, now, self._held_keys, self.capacity, half_life)
        tree = usage_weights(self.scenario.queues, self.ledger)
        if tree != self._tree:     # the same weights: the same object, so MCH keeps its state
            self._tree = tree
        return self._tree

    def holdings(self) -> list[Holding]:
        """What runs, per job, for the queues' quotas (a victim in its grace still holds)."""
        return [Holding(t.spec.queue, job_user(t.job.spec), t.spec.resources, len(t.running))
                for t in self.tracks.values() if t.running]

    def _running_ends(self, now: float) -> RunningEnds:
        """For backfill: the latest end of each task on the held nodes (as the master's)."""
        view = self.matrix.view()
        ends: dict[str, list[tuple[float | None, np.ndarray]]] = {}
        for node in self.book.holders():
            for name, index in self.on_node.get(node, ()):
                track = self.tracks[name]
                vector = view.request_vector(track.spec.resources)
                if vector is not None:
                    end = latest_end(track.running[index].started_at, track.spec.batch.time_limit_s, now)
                    ends.setdefault(node, []).append((end, vector))
        return ends

    def _round_input(self) -> tuple[dict[str, Job], dict[str, list[Task]]]:
        view = self.matrix.view()
        free_total = view.free[view.schedulable].sum(axis=0)
        jobs, tasks = {}, {}
        for name, track in self.tracks.items():
            if track.pending <= 0:
                continue
            jobs[name] = track.job
            if track.spec.batch.array:   # as the master: the round counts and takes the ranges itself
                jobs[name] = replace(track.job, unplaced=track.unplaced)
            # A gang is placed whole or not at all, and holds nodes for its whole size: no window.
            window = len(track.waiting) if track.spec.batch.array or track.spec.batch.gang else \
                _window(view.request_vector(track.spec.resources), free_total, track.pending)
            first = [track.waiting[i] for i in range(window)]
            tasks[name] = [*track.running.values(), *(Task(name, index) for index in first)]
        return jobs, tasks

    def _start(self, track: JobTrack, index: int, node: str, now: float) -> None:
        # The round places a job's waiting tasks in the order given (almost always the
        # first), then an array's unplaced indexes from the smallest.
        if track.waiting and track.waiting[0] == index:
            track.waiting.popleft()
        elif index in track.unplaced:
            track.unplaced = track.unplaced.without((index,))
        else:
            track.waiting.remove(index)
        attempt = track.attempts[index] = track.attempts.get(index, 0) + 1
        track.running[index] = Task(track.spec.name, index, TaskState.RUNNING, node=node, attempt=attempt,
                                    started_at=now)
        track.runs.append(TaskRun(index, node, now))
        self.on_node[node][(track.spec.name, index)] = None
        self.matrix.allocate(node, track.spec.resources)
        if (k := self._classify(track.spec.resources)) is not None:
            self.lotes_book.started(node, k)   # as the master tells the book on commit
        self.counters["tasks_placed"] += 1
        track.peak = max(track.peak, len(track.running))
        duration, _ = run_for(track.spec.duration, track.spec.batch.time_limit_s)
        if duration is not None:   # a requeued task runs its whole duration again
            self.push(now + duration, _END, track.spec.name, index, attempt)

    def _sample(self, now: float, force: bool = False) -> None:
        if self.preemption is not None:
            self.preemption.sample(now, force)
        shares = tuple(
            len(self.tracks[j.name].running) * self._mu[j.name] if j.name in self.tracks else 0.0
            for j in self.scenario.jobs
        )
        if self.timeline and self.timeline[-1][0] == now:
            self.timeline[-1] = (now, shares)
        elif force or not self.timeline or self.timeline[-1][1] != shares:
            self.timeline.append((now, shares))   # only changes: the timeline is a step function


def _window(request: np.ndarray | None, free_total: np.ndarray, pending: int) -> int:
    """How many pending tasks a round could place at most, plus one (so the job still
    has one waiting when it stops), never more than it has."""
    if request is None:
        return min(pending, 1)
    bounds = [math.floor(free / need + 1e-9) for need, free in zip(request.tolist(), free_total.tolist()) if need > 0]
    return min(pending, (min(bounds) if bounds else pending) + 1)


def simulate(scenario: Scenario, fairness: str, placement: str, until: float | None = None, seed: int = 0,
             lotes: LotesOptions | None = None, preemption: PreemptionSettings | None = None,
             record_queues: bool = False) -> SimRun:
    """`preemption`: the planner's settings (None: off); `record_queues`: keep each
    queue's share and target over time (SimRun.preemption) even with preemption off."""
    return Simulator(scenario, fairness, placement, seed, lotes, preemption, record_queues).run(until)
