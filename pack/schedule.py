"""One packing pass for `tcl pack`: place a whole workload from scratch on a set of enabled
machines with one job order and one placement policy of the master (Verma, Korupolu and
Wilkes, section II: every metric repacks; only the order and the policy vary).

Machines live in one NodeMatrix for the whole study; a pass enables a subset (compaction's
prefixes) and undoes its allocations exactly on exit (NodeMatrix.tentative). Tasks of a job
are identical, so when one finds no machine the rest of the job is pending too."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from tcluster.domain.constraints import parse_constraints
from tcluster.domain.resources import Resources
from tcluster.scheduler.lotes.classes import learn_classes
from tcluster.scheduler.lotes.resolve import plan_for
from tcluster.scheduler.matching import EligibleCache
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import make_placement
from tcluster.scheduler.views import NodeSpec

ORDERS = ("arrival", "cpu", "mem", "sum")
LOTES_BIN_CAP = 20_000   # a pack study re-solves per probe: keep each solve short


@dataclass(frozen=True)
class PackJob:
    name: str
    tasks: int
    request: Resources
    constraints: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pass:
    placed: np.ndarray        # (jobs,) tasks placed per job, in workload order
    free: np.ndarray          # (enabled machines, kinds) left after the pass
    capacity: np.ndarray      # (enabled machines, kinds)
    requested: int            # tasks in the workload
    allocated: np.ndarray     # (kinds,) sum of placed requests, in workload order: the same
                              # numbers, added the same way, for every policy that places all

    @property
    def pending(self) -> int:
        return self.requested - int(self.placed.sum())

    @property
    def pending_fraction(self) -> float:
        return self.pending / self.requested if self.requested else 0.0


@dataclass
class Packer:
    machines: Sequence[NodeSpec]
    policy: str
    order: str = "arrival"
    lotes_k: int = 4
    matrix: NodeMatrix = field(init=False)

    def __post_init__(self) -> None:
        self.matrix = NodeMatrix()
        for m in self.machines:
            self.matrix.upsert(m.name, m.capacity, dict(m.labels))
        self.view = self.matrix.view()
        self.rows = np.array([self.view.rows[m.name] for m in self.machines])
        self.kinds = tuple(self.matrix.kinds)
        self.cache = EligibleCache()
        self.chooser = make_placement(self.policy)
        self.median = np.median(self.view.capacity[self.rows], axis=0)
        self._classes_for: tuple[int, int] | None = None
        self._classes: tuple = ()

    def vector(self, request: Resources) -> np.ndarray:
        vector = self.view.request_vector(request)
        return np.zeros(len(self.kinds)) if vector is None else vector

    def eligible(self, job: PackJob) -> np.ndarray:
        mask = self.cache.eligible(parse_constraints(job.constraints), self.matrix)
        return np.ones(len(self.view.names), dtype=bool) if mask is None else mask

    def ordered(self, jobs: Sequence[PackJob]) -> list[int]:
        """Job indices in the study's order; ties keep arrival order (a stable sort)."""
        if self.order == "arrival":
            return list(range(len(jobs)))
        vectors = [self.vector(j.request) for j in jobs]
        key = {"cpu": lambda v: v[0], "mem": lambda v: v[1],
               "sum": lambda v: v[0] / self.median[0] + v[1] / self.median[1]}[self.order]
        return sorted(range(len(jobs)), key=lambda i: -key(vectors[i]))

    def run(self, jobs: Sequence[PackJob], enabled: Sequence[int] | None, seed: int) -> Pass:
        """`enabled`: indices into `machines` (None: all)."""
        on = np.zeros(len(self.view.names), dtype=bool)
        on[self.rows if enabled is None else self.rows[np.asarray(enabled, dtype=np.int64)]] = True
        rng, placed = random.Random(seed), np.zeros(len(jobs), dtype=np.int64)
        with self.matrix.tentative():
            self._prepare_lotes(jobs, on, seed)
            for i in self.ordered(jobs):
                placed[i] = self._place_job(jobs[i], on, rng)
            rows = np.flatnonzero(on)
            free, capacity = self.view.free[rows].copy(), self.view.capacity[rows].copy()
        allocated = np.zeros(len(self.kinds))
        for job, count in zip(jobs, placed.tolist()):
            allocated += count * self.vector(job.request)
        return Pass(placed, free, capacity, sum(j.tasks for j in jobs), allocated)

    def _place_job(self, job: PackJob, on: np.ndarray, rng: random.Random) -> int:
        request, mask = self.vector(job.request), self.eligible(job) & on
        for t in range(job.tasks):   # a pass is one round: lotes counts its own choices since begin_round
            row = self.chooser.choose(request, self.view, mask, rng)
            if row is None:
                return t   # identical tasks: none of the rest fits either
            self.matrix.allocate(self.view.names[row], job.request)
        return job.tasks

    def _prepare_lotes(self, jobs: Sequence[PackJob], on: np.ndarray, seed: int) -> None:
        """lotes re-solves for the enabled machines (a machine set change is a re-solve
        trigger), with classes learned by k-means over the workload's requests."""
        book = getattr(self.chooser, "book", None)
        if book is None:
            return
        key = (id(jobs), len(jobs))
        if self._classes_for != key:   # the classes depend on the workload, not on the machines
            points = [self.vector(j.request) for j in jobs for _ in range(min(j.tasks, 50))]
            self._classes = learn_classes(points, self.view.scale, self.lotes_k, random.Random(seed))
            self._classes_for = key
        classes = self._classes
        nodes = [(m.name, m.capacity, dict(m.labels)) for m, r in zip(self.machines, self.rows) if on[r]]
        outcome = plan_for(nodes, self.kinds, classes, bin_cap=LOTES_BIN_CAP)
        book.adopt(outcome.plan) if outcome.plan is not None else book.drop(outcome.reason)
        book.recount([])
        if hasattr(self.chooser, "begin_round"):
            self.chooser.begin_round()
