"""The queueing simulator behind `tcl sim` for generated workloads: Tran et al.'s model
(section 2), single-task jobs arriving by a Poisson process, dispatched at arrival and at
completion, waiting in queues otherwise. Decisions take no time; at equal times
completions go first. The response time is the paper's: arrival until start.

Policies, all over the master's NodeMatrix and placement code:
- lotes: stage 3 (scheduler/lotes/dispatch.py): roulette + v-score at arrival, |K| class
  queues offered by v at completions (section 4.3).
- tetris: the paper's variant (section 5.1): score omega - gamma, omega = request . free
  (normalized to the largest node), gamma = duration x sum(request), duration on that
  machine's configuration; one queue, at a completion the best-scoring queued task that fits.
- greedy: the paper's real Greedy baseline (section 5.1): first fit in Table 1 order (node
  name order, when names follow the table) at arrival, otherwise the FIFO queue of the
  machine with the shortest queue (among those that could ever hold the task; ties in
  name order); a machine serves only its own queue, head first, at its completions. A
  task queued behind a busy machine waits even when another machine frees up: this is
  what makes it unstable at high load.
- any placement policy P of the master, named `P-central` (`first-fit-central` is what
  this comparison called first-fit before): P at arrival, one central FIFO queue scanned
  at every completion. Not the paper's Greedy: the central queue keeps it stable.

Arrivals are drawn once per seed and shared by every policy (common random numbers)."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

import numpy as np

from tcluster.domain.resources import Resources
from tcluster.scheduler.lotes.dispatch import LotesBook, choose_row, offer_order
from tcluster.scheduler.lotes.model import JobClass, Plan
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import make_placement
from tcluster.scheduler.policybase import EPSILON, fit_mask
from tcluster.sim.clock import EventHeap

SCAN_LIMIT = 2000          # queued tasks looked at per completion (the queue is short when stable)
MAX_QUEUE = 20_000         # past this many waiting tasks the run is called unstable and stops
CENTRAL = "-central"       # a master placement policy over one central FIFO queue


def comparison_name(policy: str) -> str:
    """What a policy is called in the comparison: lotes, tetris and greedy have their own
    queues; any other placement policy runs over the central queue and says so."""
    return policy if policy in ("lotes", "tetris", "greedy") or policy.endswith(CENTRAL) else policy + CENTRAL


def base_policy(policy: str) -> str:
    """The placement policy behind a comparison name (`first-fit-central` -> first-fit)."""
    return policy[: -len(CENTRAL)] if policy.endswith(CENTRAL) else policy


@dataclass(frozen=True)
class Arrivals:
    time: np.ndarray        # (n,)
    klass: np.ndarray       # (n,) int
    request: np.ndarray     # (n, kinds), actual requests
    work: np.ndarray        # (n,)


def draw_arrivals(classes: tuple[JobClass, ...], rate: float, horizon: float, work_mean: float, cv: float,
                  largest: np.ndarray, seed: int) -> Arrivals:
    """Poisson arrivals at `rate`, classes by share, requests Gaussian around the class mean
    with coefficient of variation `cv`, truncated to (0, largest] by rejection; work Exp."""
    rng = np.random.default_rng([seed, 7])
    n = int(rng.poisson(rate * horizon))
    times = np.sort(rng.uniform(0.0, horizon, n))
    shares = np.array([c.share for c in classes], dtype=float)
    klass = rng.choice(len(classes), size=n, p=shares / shares.sum())
    means = np.array([c.request for c in classes], dtype=float)[klass]
    request = rng.normal(means, cv * means)
    for _ in range(100):   # rejection: redraw what fell outside (0, largest]
        bad = (request <= 0) | (request > largest)
        bad &= means > 0
        if not bad.any():
            break
        request[bad] = rng.normal(means[bad], cv * means[bad])
    request = np.clip(np.where(means > 0, request, 0.0), 0.0, largest)
    request[:, 1] = np.floor(request[:, 1])   # memory is whole bytes, as the NodeMatrix books it
    return Arrivals(times, klass, request, rng.exponential(work_mean, n))


@dataclass
class QueueRun:
    policy: str
    arrivals: int
    waits: np.ndarray           # per arrived task: arrival to start, or to the end if never started
    sojourns: np.ndarray        # per finished task: arrival to end
    unstarted: int              # still waiting at the end (censored)
    queue: list[tuple[float, int]]   # (time, waiting tasks) at each change
    end: float
    unstable: bool


class QueueSim:
    def __init__(self, matrix: NodeMatrix, config_of: dict[str, int], speeds: np.ndarray, policy: str,
                 plan: Plan | None, arrivals: Arrivals, seed: int) -> None:
        self.matrix, self.view = matrix, matrix.view()
        self.config_rows = np.array([config_of.get(n, -1) if n else -1 for n in self.view.names])
        self.speeds, self.policy_name, self.arrivals = speeds, policy, arrivals
        self.rng = random.Random(seed)
        self.book = LotesBook(plan) if policy == "lotes" else None
        greedy = policy == "greedy"
        self.placement = None if policy in ("lotes", "tetris") else \
            make_placement("first-fit" if greedy else base_policy(policy))
        # greedy: one FIFO queue per machine row (the paper's Greedy), else None
        self.machine_queues: list[deque[int]] | None = [deque() for _ in self.view.names] if greedy else None
        k = len(speeds[0])
        self.queues: list[list[int]] = [[] for _ in range(k)] if policy == "lotes" else [[]]
        self.start = np.full(len(arrivals.time), np.nan)
        self.finish = np.full(len(arrivals.time), np.nan)
        self._row_of = np.zeros(len(arrivals.time), dtype=np.int64)
        self.waiting, self.queue_log = 0, [(0.0, 0)]
        # kind 0 = end / 1 = arrival, then by task: at equal times ends first, in task order
        self.events: EventHeap[int] = EventHeap()

    def run(self, horizon: float) -> QueueRun:
        for i, t in enumerate(self.arrivals.time.tolist()):
            self.events.push(t, 1, i, tie=i)
        now, unstable = 0.0, False
        while self.events and self.events.peek() <= horizon:
            kind, task = self.events.pop()
            now = self.events.now
            self._arrive(task, now) if kind == 1 else self._end(task, now)
            if self.waiting > MAX_QUEUE:
                unstable = True
                break
        started = ~np.isnan(self.start)
        arrived_mask = self.arrivals.time <= now
        # Tasks still waiting at the end count with their wait so far (censored, a lower
        # bound): leaving them out would reward a policy for starving them.
        waits = np.where(started, self.start, now)[arrived_mask] - self.arrivals.time[arrived_mask]
        done = ~np.isnan(self.finish)
        arrived = int((self.arrivals.time <= now).sum())
        return QueueRun(self.policy_name, arrived, waits, (self.finish - self.arrivals.time)[done],
                        arrived - int(started.sum()), self.queue_log, now, unstable)

    # ---- events ----

    def _arrive(self, task: int, now: float) -> None:
        request, k = self.arrivals.request[task], int(self.arrivals.klass[task])
        fits = fit_mask(request, self.view, None).copy()
        if self.book is not None:
            config_rows, target, running = self.book.arrays(self.view)
            row = choose_row(k, fits, config_rows, target[:, k], running[:, k], self.book.plan, self.view, self.rng)
        elif self.placement is None:
            row = self._tetris_row(task, fits)
        else:
            row = self.placement.choose(request, self.view, None, self.rng)
        if row is None and self.machine_queues is not None:
            self.machine_queues[self._shortest_queue(request)].append(task)
            self._queue_changed(now, +1)
        elif row is None:
            self.queues[k if self.book is not None else 0].append(task)
            self._queue_changed(now, +1)
        else:
            self._start(task, row, now)

    def _end(self, task: int, now: float) -> None:
        self.finish[task] = now
        row = int(self._row_of[task])
        name = self.view.names[row]
        self.matrix.release(name, _resources(self.matrix, self.arrivals.request[task]))
        if self.book is not None:
            self.book.ended(name, int(self.arrivals.klass[task]))
            self._offer_lotes(row, now)
        elif self.placement is None:
            self._offer_tetris(row, now)
        elif self.machine_queues is not None:
            self._offer_machine(row, now)
        else:
            self._offer_fifo(row, now)

    def _start(self, task: int, row: int, now: float) -> None:
        k, name = int(self.arrivals.klass[task]), self.view.names[row]
        self.matrix.allocate(name, _resources(self.matrix, self.arrivals.request[task]))
        self.start[task] = now
        self._row_of[task] = row
        if self.book is not None:
            self.book.started(name, k)
        duration = self.arrivals.work[task] / self.speeds[self.config_rows[row], k]
        self.events.push(now + duration, 0, task, tie=task)

    # ---- completions: who gets the freed machine ----

    def _fitting(self, queue: list[int], row: int) -> np.ndarray:
        """Positions (in the first SCAN_LIMIT) of the queued tasks that fit `row`, in order."""
        if not queue:
            return np.zeros(0, dtype=np.int64)
        need = self.arrivals.request[queue[:SCAN_LIMIT]]
        ok = np.all((need <= 0) | (self.view.free[row] >= need - EPSILON), axis=1)
        return np.flatnonzero(ok)

    def _take(self, queue: list[int], row: int) -> int | None:
        positions = self._fitting(queue, row)
        return queue.pop(int(positions[0])) if len(positions) else None

    def _offer_fifo(self, row: int, now: float) -> None:
        while (task := self._take(self.queues[0], row)) is not None:
            self._queue_changed(now, -1)
            self._start(task, row, now)

    def _shortest_queue(self, request: np.ndarray) -> int:
        """The machine with the fewest queued tasks among those whose capacity could ever
        hold the request (a scenario's requests all fit its largest machine); ties go to
        the first in name order."""
        cap = self.view.capacity
        able = np.all((request <= 0) | (cap >= request - EPSILON), axis=1) & self.view.schedulable
        lengths = np.array([len(q) for q in self.machine_queues], dtype=float)   # type: ignore[union-attr]
        lengths[~able] = np.inf
        in_order = lengths[self.view.order]
        return int(self.view.order[int(in_order.argmin())])

    def _offer_machine(self, row: int, now: float) -> None:
        """A machine serves its own FIFO queue, head first, while the head fits."""
        queue = self.machine_queues[row]   # type: ignore[index]
        while queue and np.all(self.view.free[row] >= self.arrivals.request[queue[0]] - EPSILON):
            task = queue.popleft()
            self._queue_changed(now, -1)
            self._start(task, row, now)

    def _offer_lotes(self, row: int, now: float) -> None:
        config = int(self.config_rows[row])
        active = [k for k, q in enumerate(self.queues) if q]
        while active and config >= 0:
            _, target, running = self.book.arrays(self.view)
            order = offer_order(config, target[row], running[row], self.book.plan, active)
            for k in order:
                task = self._take(self.queues[k], row)
                if task is not None:
                    self._queue_changed(now, -1)
                    self._start(task, row, now)
                    break
                active.remove(k)   # nothing of this class fits now, nor will during this event
            else:
                return

    def _offer_tetris(self, row: int, now: float) -> None:
        queue = self.queues[0]
        while len(positions := self._fitting(queue, row)):
            tasks = np.array(queue)[positions]
            scores = self._tetris_scores_on(tasks, row)
            best = int(positions[int(scores.argmax())])   # ties: the earliest queued
            task = queue.pop(best)
            self._queue_changed(now, -1)
            self._start(task, row, now)

    def _tetris_scores_on(self, tasks: np.ndarray, row: int) -> np.ndarray:
        need = self.arrivals.request[tasks] / self.view.scale
        omega = need @ (self.view.free[row] / self.view.scale)
        duration = self.arrivals.work[tasks] / self.speeds[self.config_rows[row], self.arrivals.klass[tasks]]
        return omega - duration * need.sum(axis=1)

    def _tetris_row(self, task: int, fits: np.ndarray) -> int | None:
        rows = np.flatnonzero(fits)
        if not len(rows):
            return None
        scores = self._tetris_score(task, rows)
        best = rows[scores == scores.max()]
        return int(best[self.view.rank[best].argmin()])

    def _tetris_score(self, task: int, rows: np.ndarray) -> np.ndarray:
        """omega - gamma with equal weights: alignment with the free vector minus the work."""
        need = self.arrivals.request[task] / self.view.scale
        omega = (self.view.free[rows] / self.view.scale) @ need
        k = int(self.arrivals.klass[task])
        duration = self.arrivals.work[task] / self.speeds[self.config_rows[rows], k]
        return omega - duration * need.sum()

    def _queue_changed(self, now: float, delta: int) -> None:
        self.waiting += delta
        if self.queue_log[-1][0] == now:
            self.queue_log[-1] = (now, self.waiting)
        else:
            self.queue_log.append((now, self.waiting))


def _resources(matrix: NodeMatrix, vector: np.ndarray) -> Resources:
    return Resources.of(dict(zip(matrix.kinds, vector.tolist())))
