"""A synthetic federation workload, since the paper's traces (Google 2019, Alibaba 2018,
Cloudera) cannot be fetched here (notes §4.2, §5). Everything is drawn from one seeded
random.Random, so a seed names a workload.

Nodes: the paper's 64 cores and 16 GB each (§V). Constraints are a documented stand-in
for Sharma et al.'s cluster profiles A/B/C, whose probability tables the paper does not
reproduce: 21 constraints; three profiles each draw a per-constraint rate uniformly in
[0.6, 0.95]; each LM picks one profile at random, and a node satisfies constraint c with
its profile's rate. Half the tasks carry one or two constraints (§II-B: ~50% of Google
tasks have simple constraints); a draw that no node of the federation satisfies is
dropped and drawn again.

Tasks: 4, 8, 16 or 32 cores (weights 4:3:2:1, mean 10.4) and 32-128 MB per core, so
that a few thousand tasks fill a few hundred 64-core nodes for several task lifetimes.
Durations are Pareto (alpha 1.5, heavy-tailed) with the given mean, cut at 50x the mean
so that one run stays bounded. Arrivals are Poisson; their rate is the one at which the
expected busy cores reach `load` of the federation's cores by the last arrival, ramp
included (0.9 by default, the notes' "≥ 90% of capacity"): a few thousand tasks last
only a few task lifetimes, so the steady-state rate would peak well below `load`."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tcluster.federation.messages import LMNode, TaskRequest, satisfies

NODE_CAP = (64, 16384)           # cores, MB (§V)
N_CONSTRAINTS = 21               # §IV-B1
PROFILES = 3                     # Sharma et al.'s clusters A, B, C (stand-in rates)
RATE_RANGE = (0.6, 0.95)
TASK_CORES = ((4, 4), (8, 3), (16, 2), (32, 1))    # (cores, weight)
MB_PER_CORE = (32, 128)
TAIL_CUT = 50.0


@dataclass(frozen=True)
class WorkloadSpec:
    tasks: int = 4550
    load: float = 0.9
    mean_duration_s: float = 10.0
    pareto_alpha: float = 1.5
    constrained: float = 0.5
    n_constraints: int = N_CONSTRAINTS


@dataclass(frozen=True)
class Arrival:
    t: float
    gm_queue: str
    task: TaskRequest


def cluster_nodes(rng: random.Random, lms: int, workers: int,
                  n_constraints: int = N_CONSTRAINTS) -> list[tuple[LMNode, ...]]:
    """`workers` nodes split as equally as possible over `lms` clusters."""
    profiles = [[rng.uniform(*RATE_RANGE) for _ in range(n_constraints)] for _ in range(PROFILES)]
    clusters = []
    for lm in range(lms):
        rates = rng.choice(profiles)
        count = workers // lms + (lm < workers % lms)
        clusters.append(tuple(LMNode(NODE_CAP, _mask(rng, rates)) for _ in range(count)))
    return clusters


def _mask(rng: random.Random, rates: list[float]) -> int:
    return sum(1 << c for c, p in enumerate(rates) if rng.random() < p)


def _cores(rng: random.Random) -> int:
    values, weights = zip(*TASK_CORES)
    return rng.choices(values, weights)[0]


def _duration(rng: random.Random, spec: WorkloadSpec) -> float:
    a = spec.pareto_alpha
    xm = spec.mean_duration_s * (a - 1) / a
    return min(xm * (1.0 - rng.random()) ** (-1.0 / a), TAIL_CUT * spec.mean_duration_s)


def _constraints(rng: random.Random, spec: WorkloadSpec, masks: set[int]) -> int:
    if spec.n_constraints == 0 or rng.random() >= spec.constrained:
        return 0
    for _ in range(20):
        k = rng.randint(1, min(2, spec.n_constraints))
        pc = sum(1 << c for c in rng.sample(range(spec.n_constraints), k))
        if any(satisfies(m, pc) for m in masks):
            return pc
    return 0


def _busy_time(spec: WorkloadSpec, horizon: float) -> float:
    """E[min(D, horizon)] for the cut Pareto: how long a task that arrived `horizon`
    ago is expected to have held its cores."""
    a = spec.pareto_alpha
    xm = spec.mean_duration_s * (a - 1) / a
    t = min(horizon, TAIL_CUT * spec.mean_duration_s)
    if t <= xm:
        return t
    return xm + xm ** a / (1 - a) * (t ** (1 - a) - xm ** (1 - a))


def arrival_rate(spec: WorkloadSpec, total_cores: int) -> float:
    """The Poisson rate at which busy cores reach `load` x capacity by the last arrival:
    busy(T) = rate x E[cores] x E[min(D, T)] with T = tasks / rate (a fixed point)."""
    mean_cores = sum(c * w for c, w in TASK_CORES) / sum(w for _, w in TASK_CORES)
    target = spec.load * total_cores / mean_cores
    rate = target / spec.mean_duration_s
    for _ in range(50):
        rate = target / _busy_time(spec, spec.tasks / rate)
    return rate


def tasks(rng: random.Random, spec: WorkloadSpec, clusters: list[tuple[LMNode, ...]],
          queues: list[str]) -> list[Arrival]:
    """Poisson arrivals offering `spec.load` of the cores; each task in a random queue."""
    total_cores = sum(n.cap[0] for nodes in clusters for n in nodes)
    rate = arrival_rate(spec, total_cores)
    masks = {n.cmask for nodes in clusters for n in nodes}
    t, out = 0.0, []
    for i in range(spec.tasks):
        t += rng.expovariate(rate)
        cores = _cores(rng)
        req = (cores, cores * rng.randint(*MB_PER_CORE))
        queue = rng.choice(queues)
        task = TaskRequest(f"t{i}", queue, req, _constraints(rng, spec, masks), _duration(rng, spec))
        out.append(Arrival(t, queue, task))
    return out
