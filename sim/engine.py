"""The discrete-event simulator: job submissions and task ends are events on a heap. At
each event time the simulator applies every event due, then runs one scheduling round.
That round is the master's own `schedule_round`, with the same fairness and placement
registries, the same NodeMatrix, reservations and queue tree. There is no sleeping and
no threads: the clock jumps from event to event.

A round only sees the pending tasks that could possibly fit, at most as many as the
free total allows plus one. This keeps a round O(running tasks) and not O(all tasks).
The decisions are the same, because a job can never place more tasks than that in
one round."""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

import numpy as np

from tcluster.scheduler.round import schedule_round
from tcluster.model import Job, JobSpec, Task, TaskState
from tcluster.resources import Resources
from tcluster.scheduler.fairness import make_fairness
from tcluster.scheduler.matching import EligibleCache
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import make_placement
from tcluster.scheduler.reservations import Reservations
from tcluster.sim.scenario import Scenario, SimJob

_SUBMIT, _END = 0, 1   # at equal times tasks end after submissions are in; both before the round


@dataclass
class TaskRun:
    task: int
    node: str
    start: float
    end: float | None = None     # None: still running at the end of the run


@dataclass
class JobTrack:
    spec: SimJob
    job: Job
    next_task: int = 0
    done: int = 0
    running: dict[int, Task] = field(default_factory=dict)
    runs: list[TaskRun] = field(default_factory=list)

    @property
    def pending(self) -> int:
        return self.spec.tasks - self.next_task


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


class Simulator:
    def __init__(self, scenario: Scenario, fairness: str, placement: str, seed: int = 0,
                 lotes: LotesOptions | None = None) -> None:
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
        self.book = Reservations(scenario.reserve_after_s)
        self.tracks: dict[str, JobTrack] = {}
        self.events: list[tuple[float, int, int, str, int]] = []   # (time, kind, seq, job, task)
        self.seq = 0
        self.counters = {"events": 0, "rounds": 0, "tasks_placed": 0, "tasks_done": 0}
        self.timeline: list[tuple[float, tuple[float, ...]]] = []
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
        for job in self.scenario.jobs:
            self._push(job.submit, _SUBMIT, job.name, -1)
        now = 0.0
        while self.events and (until is None or self.events[0][0] <= until):
            now = self.events[0][0]
            while self.events and self.events[0][0] == now:
                _, kind, _, name, index = heapq.heappop(self.events)
                self.counters["events"] += 1
                self._submit(name, now) if kind == _SUBMIT else self._end(name, index, now)
            self._round(now)
            self._sample(now)
        end = now if until is None else until
        self._sample(end, force=True)   # the last row is the state the report gives
        tracks = tuple(self.tracks[j.name] for j in self.scenario.jobs if j.name in self.tracks)
        return SimRun(end, tracks, self.matrix, self.capacity, dict(self.counters), tuple(self.timeline), self.lotes)

    def _push(self, time: float, kind: int, name: str, index: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (time, kind, self.seq, name, index))

    def _submit(self, name: str, now: float) -> None:
        spec = next(j for j in self.scenario.jobs if j.name == name)
        job_spec = JobSpec(("sim",), spec.resources, name=name, queue=spec.queue, tasks=spec.tasks,
                           constraints=spec.constraints, weight=spec.weight)
        self.tracks[name] = JobTrack(spec, Job(name, job_spec, submitted_at=now))

    def _end(self, name: str, index: int, now: float) -> None:
        track = self.tracks[name]
        task = track.running.pop(index)
        self.matrix.release(task.node, track.spec.resources)
        if (k := self._classify(track.spec.resources)) is not None:
            self.lotes_book.ended(task.node, k)
        track.done += 1
        self.counters["tasks_done"] += 1
        next(r for r in reversed(track.runs) if r.task == index).end = now

    def _round(self, now: float) -> None:
        jobs, tasks = self._round_input()
        if not jobs:
            return
        self.counters["rounds"] += 1
        result = schedule_round(jobs, tasks, self.matrix, self.fairness, self.placement, self.rng, self.cache,
                                queues=self.scenario.queues, reservations=self.book, now=now)
        self.book = result.holds or self.book
        for task, node in result.placements:
            self._start(self.tracks[task.job_id], task.index, node, now)

    def _round_input(self) -> tuple[dict[str, Job], dict[str, list[Task]]]:
        view = self.matrix.view()
        free_total = view.free[view.schedulable].sum(axis=0)
        jobs, tasks = {}, {}
        for name, track in self.tracks.items():
            if track.pending <= 0:
                continue
            window = _window(view.request_vector(track.spec.resources), free_total, track.pending)
            jobs[name] = track.job
            tasks[name] = [*track.running.values(), *(Task(name, track.next_task + i) for i in range(window))]
        return jobs, tasks

    def _start(self, track: JobTrack, index: int, node: str, now: float) -> None:
        assert index == track.next_task, (index, track.next_task)
        track.next_task += 1
        track.running[index] = Task(track.spec.name, index, TaskState.RUNNING, node=node, attempt=1)
        track.runs.append(TaskRun(index, node, now))
        self.matrix.allocate(node, track.spec.resources)
        if (k := self._classify(track.spec.resources)) is not None:
            self.lotes_book.started(node, k)   # as the master tells the book on commit
        self.counters["tasks_placed"] += 1
        if track.spec.duration is not None:
            self._push(now + track.spec.duration, _END, track.spec.name, index)

    def _sample(self, now: float, force: bool = False) -> None:
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
             lotes: LotesOptions | None = None) -> SimRun:
    return Simulator(scenario, fairness, placement, seed, lotes).run(until)
