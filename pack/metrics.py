"""Verma, Korupolu and Wilkes's four packing metrics ("Evaluating job packing in
warehouse-scale computing", section III), each with the paper's procedure.

- utilization: requests placed / capacity, per resource (III-A).
- hole filling: placed requests plus the multi-dimensional units (x of the median machine,
  every resource scaled together) that still fit machine by machine (III-B).
- workload inflation: grow the workload until it no longer fits; horizontal (clone jobs:
  ceil(n (f - 1)) more tasks) or vertical (scale requests, clipped to the largest eligible
  machine), all jobs or conforming ones only (Algorithm 1); the Monte-Carlo variant adds
  clones of random original jobs until tau is exceeded (Algorithm 2, incremental).
- compaction: binary search over prefixes of a random machine permutation for the smallest
  cluster that still runs the workload with pending <= tau, after the expansion step;
  the 90th percentile (nearest rank) of 11 trials (Algorithm 3). Two defects of the printed
  pseudocode are fixed: the loop runs while hi - lo > mu (">= mu" never ends for mu = 1)
  and it returns hi, a size known to be feasible (the printed `mid` can be infeasible)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from tcluster.pack.schedule import PackJob, Packer, Pass
from tcluster.scheduler.views import NodeSpec

PICKY_SIZE, PICKY_SPREAD = 0.6, 0.6   # the paper sets both thresholds to 60%
MAX_EXPANSION = 8                      # clone the cluster at most 3 times (8x) before giving up


def utilization(p: Pass) -> np.ndarray:
    return p.allocated / p.capacity.sum(axis=0)


def hole_filling(p: Pass, unit: float, median: np.ndarray) -> np.ndarray:
    """Per resource: (allocated + k U) / capacity, k = sum over machines of the units that fit."""
    size = unit * median
    use = size > 0
    fit = np.floor((p.free[:, use] + 1e-9) / size[use]).min(axis=1) if use.any() else np.zeros(len(p.free))
    k = np.clip(fit, 0, None).sum()
    return (p.allocated + k * size) / p.capacity.sum(axis=0)


def conforming(packer: Packer, jobs: Sequence[PackJob]) -> list[bool]:
    """A job is conforming unless its tasks are "picky": bigger than 60% of the median
    machine in some resource, or eligible on fewer than 60% of the machines."""
    total = len(packer.machines)
    marks = []
    for job in jobs:
        big = np.any(packer.vector(job.request) > PICKY_SIZE * packer.median)
        eligible = int(packer.eligible(job)[packer.rows].sum())
        marks.append(not big and eligible >= PICKY_SPREAD * total)
    return marks


def inflate(packer: Packer, jobs: Sequence[PackJob], f: float, vertical: bool, scope: list[bool]) -> list[PackJob]:
    """The workload grown by f (a fresh copy: Algorithm 1 applied in place would compound)."""
    if vertical:
        return [_scaled(packer, j, f) if grow else j for j, grow in zip(jobs, scope)]
    clones = [replace(j, name=f"{j.name}+", tasks=math.ceil(j.tasks * (f - 1) - 1e-9))
              for j, grow in zip(jobs, scope) if grow]
    return [*jobs, *(c for c in clones if c.tasks > 0)]


def _scaled(packer: Packer, job: PackJob, f: float) -> PackJob:
    """cpu and memory times f, clipped to the largest machine the job may use."""
    rows = packer.rows[packer.eligible(job)[packer.rows]]
    largest = packer.view.capacity[rows].max(axis=0) if len(rows) else packer.view.capacity.max(axis=0)
    amounts = job.request.as_dict()
    for i, kind in enumerate(("cpu", "memory")):
        amounts[kind] = min(amounts.get(kind, 0.0) * f, float(largest[i]))
    return replace(job, request=type(job.request).of(amounts))


@dataclass(frozen=True)
class Inflation:
    factor: float                     # the largest f found with pending <= tau
    curve: tuple[tuple[float, float, tuple[float, ...]], ...]   # (f, pending fraction, utilization)


def inflation(packer: Packer, jobs: Sequence[PackJob], vertical: bool, only_conforming: bool, tau: float,
              seed: int, step: float = 0.1, limit: float = 4.0) -> Inflation:
    """Algorithm 1 over f = 1, 1 + step, ... until pending exceeds tau; then the knee by
    bisection to 0.01 between the last good and the first bad factor (the paper eyeballs it)."""
    scope = conforming(packer, jobs) if only_conforming else [True] * len(jobs)
    curve, good, bad, f = [], 1.0, None, 1.0
    while f <= limit + 1e-9:
        p = packer.run(inflate(packer, jobs, f, vertical, scope), None, seed)
        curve.append((round(f, 4), p.pending_fraction, tuple(utilization(p).tolist())))
        if p.pending_fraction > tau:
            bad = f
            break
        good, f = f, f + step
    while bad is not None and bad - good > 0.01 + 1e-9:
        mid = (good + bad) / 2
        p = packer.run(inflate(packer, jobs, mid, vertical, scope), None, seed)
        good, bad = (mid, bad) if p.pending_fraction <= tau else (good, mid)
    return Inflation(good, tuple(curve))


def monte_carlo(packer: Packer, jobs: Sequence[PackJob], only_conforming: bool, tau: float, seed: int) -> tuple[int, np.ndarray]:
    """Algorithm 2, incremental: clones of uniformly random ORIGINAL jobs are placed on the
    current packing until pending exceeds tau. Returns (clones added, utilization)."""
    pool = [j for j, ok in zip(jobs, conforming(packer, jobs)) if ok] if only_conforming else list(jobs)
    rng, added = random.Random(seed), 0
    if not pool:
        p = packer.run(jobs, None, seed)
        return 0, utilization(p)
    with packer.matrix.tentative():
        on = np.zeros(len(packer.view.names), dtype=bool)
        on[packer.rows] = True
        packer._prepare_lotes(jobs, on, seed)
        order = packer.ordered(jobs)
        placed = sum(packer._place_job(jobs[i], on, rng) for i in order)
        requested = sum(j.tasks for j in jobs)
        while (requested - placed) / requested <= tau and added < 100 * len(jobs):
            clone = pool[rng.randrange(len(pool))]
            placed += packer._place_job(clone, on, rng)
            requested += clone.tasks
            added += 1
        free, capacity = packer.view.free[packer.rows], packer.view.capacity[packer.rows]
        util = (capacity - free).sum(axis=0) / capacity.sum(axis=0)
    return added, util


@dataclass(frozen=True)
class Compaction:
    p90: float            # fraction of the original machine count
    low: float
    high: float
    sizes: tuple[int, ...]  # per trial, machines needed
    expanded: int         # times the cluster was doubled before the workload fit
    feasible: bool = True   # False: even the largest expansion leaves more than tau pending


def compaction_trial(packer: Packer, jobs: Sequence[PackJob], tau: float, mu: int, seed: int) -> int:
    """Algorithm 3 on `packer`'s machines (already expanded): the smallest prefix size of a
    seeded random permutation whose pass has pending <= tau."""
    permutation = list(range(len(packer.machines)))
    random.Random(seed).shuffle(permutation)
    lo, hi = 0, len(permutation)   # invariant: lo infeasible (or empty), hi feasible
    while hi - lo > mu:
        mid = (lo + hi) // 2
        if packer.run(jobs, permutation[:mid], seed).pending_fraction > tau:
            lo = mid
        else:
            hi = mid
    return hi


def compaction(machines: Sequence[NodeSpec], jobs: Sequence[PackJob], policy: str, order: str, tau: float,
               trials: int = 11, mu: int = 1, seed: int = 0) -> Compaction:
    expanded, cluster = 0, list(machines)
    packer = Packer(cluster, policy, order)
    while packer.run(jobs, None, seed).pending_fraction > tau and expanded < math.log2(MAX_EXPANSION):
        cluster = cluster + [replace(m, name=f"{m.name}~{2 ** (expanded + 1)}") for m in cluster]   # steps 1-4
        expanded += 1
        packer = Packer(cluster, policy, order)
    if packer.run(jobs, None, seed).pending_fraction > tau:   # constraints no machine meets, say
        return Compaction(math.nan, math.nan, math.nan, (), expanded, feasible=False)
    sizes = sorted(compaction_trial(packer, jobs, tau, mu, seed * 1000 + t) for t in range(trials))
    n = len(machines)
    p90 = sizes[math.ceil(0.9 * trials) - 1]   # nearest rank: the 10th of 11
    return Compaction(p90 / n, sizes[0] / n, sizes[-1] / n, tuple(sizes), expanded)
