"""Megha against its baselines on one draw of nodes and arrivals (common random
numbers): the federation (N LMs x M GMs), centralized Megha (1 GM x 1 LM over the same
nodes: one LM holds every node, one GM every queue) and the Sparrow batch sampler
(sim/federation/sparrow.py). Each system's allocation time is summarized the same way: p50,
p99 and max, its four components (Eq. 2: queuing, processing, worker queuing,
communication), and its rates per 1,000 tasks."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Iterable

import numpy as np

from tcluster.federation.messages import LMNode
from tcluster.sim.federation.calibrate import measure_handlers, with_handlers
from tcluster.sim.federation.report import peak_busy, pcts
from tcluster.sim.federation.sim import FedConfig, FederationSim, queues_of
from tcluster.sim.federation.sparrow import SparrowConfig, SparrowRun, simulate_sparrow
from tcluster.sim.federation.workload import Arrival, WorkloadSpec, cluster_nodes, tasks

SYSTEMS = ("megha", "centralized", "sparrow")
COMPONENTS = ("queuing", "processing", "worker queuing", "communication")


@dataclass(frozen=True)
class SystemResult:
    system: str                                     # e.g. "megha 10x10", "sparrow d=2"
    workers: int
    tasks: int
    placed: int
    alloc_ms: tuple[float, float, float]            # p50, p99, max
    parts_ms: dict[str, tuple[float, float, float]]
    shares: dict[str, float]                        # each component's share of the total
    per_1000: dict[str, float]
    peak_busy: float
    alloc_s: tuple[float, ...]                      # every placed task's, for the CDF
    handlers: str = ""                              # the handler times it ran with, in words


def draw(workers: int, lms: int, gms: int, queues_per_gm: int, spec: WorkloadSpec,
         seed: int) -> tuple[list[tuple[LMNode, ...]], list[Arrival]]:
    """The federation's nodes (per LM) and arrivals, as sim.py's simulate draws them."""
    rng = random.Random(seed)
    clusters = cluster_nodes(rng, lms, workers, spec.n_constraints)
    queues = [q for g in range(gms) for q in queues_of(g, queues_per_gm)]
    return clusters, tasks(rng, spec, clusters, queues)


def _result(system: str, workers: int, tasks_n: int, alloc: np.ndarray, parts: dict[str, np.ndarray],
            counts: dict[str, int], busy: float) -> SystemResult:
    total = float(alloc.sum()) or 1.0
    n = max(tasks_n, 1)
    return SystemResult(
        system, workers, tasks_n, int(alloc.size), pcts(alloc), {k: pcts(v) for k, v in parts.items()},
        {k: float(v.sum()) / total for k, v in parts.items()}, {k: 1000.0 * v / n for k, v in counts.items()},
        busy, tuple(float(x) for x in alloc))


def megha(config: FedConfig, clusters: list[tuple[LMNode, ...]], arrivals: list[Arrival],
          system: str, measured: bool = False) -> SystemResult:
    """measured: the handler times are first measured on the real code with this draw
    (sim/federation/calibrate.py), else config's constants."""
    if measured:
        times = measure_handlers(config, clusters, arrivals)
        config, handlers = with_handlers(config, times), times.describe()
    else:
        handlers = (f"handler times constant: GM {config.gm_handler_s * 1e6:.0f} us, "
                    f"LM {config.lm_handler_s * 1e6:.0f} us")
    run = FederationSim(config, clusters, arrivals).simulate()
    started = [r for r in run.records.values() if r.start is not None]
    alloc = np.array([r.start - r.arrival for r in started])
    proc = np.array([r.processing for r in started])
    comm = np.array([r.communication for r in started])
    parts = {"queuing": np.maximum(alloc - proc - comm, 0.0), "processing": proc,
             "worker queuing": np.zeros(alloc.size), "communication": comm}
    s = run.gm_stats
    internal = sum(x.internal_inconsistencies for x in s)
    external = sum(x.external_inconsistencies for x in s)
    counts = {"inconsistencies": internal + external, "internal inconsistencies": internal,
              "external inconsistencies": external, "repartitions": sum(x.repartitions for x in s),
              "preemptions": sum(x.preemptions for x in s)}
    return replace(_result(system, sum(map(len, clusters)), len(arrivals), alloc, parts, counts, peak_busy(run)),
                   handlers=handlers)


def sparrow(config: SparrowConfig, nodes: tuple[LMNode, ...], arrivals: list[Arrival]) -> SystemResult:
    run = simulate_sparrow(config, nodes, arrivals)
    started = [r for r in run.records.values() if r.start is not None]
    alloc = np.array([r.start - r.arrival for r in started])
    proc = np.array([r.processing for r in started])
    comm = np.array([r.communication for r in started])
    parts = {"queuing": np.zeros(alloc.size), "processing": proc,
             "worker queuing": np.maximum(alloc - proc - comm, 0.0), "communication": comm}
    counts = {"inconsistencies": 0, "repartitions": 0, "no-op asks": run.noops}
    return _result(f"sparrow d={config.probes}", len(nodes), len(arrivals), alloc, parts, counts,
                   sparrow_peak_busy(run))


def sparrow_peak_busy(run: SparrowRun) -> float:
    busy = peak = 0
    for kind, _node, _task, req in run.ledger:
        busy += req[0] if kind == "commit" else -req[0]
        peak = max(peak, busy)
    total = sum(n.cap[0] for n in run.nodes)
    return peak / total if total else 0.0


def compare(config: FedConfig, spec: WorkloadSpec, systems: Iterable[str] = SYSTEMS,
            probes: int = 2, measured: bool = False) -> list[SystemResult]:
    """Every system on the federation's draw of nodes and arrivals (config.seed). measured:
    each Megha system's handler times are measured on the real code first (its own GM and
    LM sizes); Sparrow's scheduler keeps config.gm_handler_s (it is not our code)."""
    clusters, arrivals = draw(config.workers, config.lms, config.gms, config.queues_per_gm, spec, config.seed)
    flat = tuple(n for nodes in clusters for n in nodes)
    out = []
    for name in systems:
        if name == "megha":
            out.append(megha(config, clusters, arrivals, f"megha {config.gms}GMx{config.lms}LM", measured))
        elif name == "centralized":
            one = replace(config, lms=1, gms=1, queues_per_gm=1)
            alone = [Arrival(a.t, "q0.0", replace(a.task, queue="q0.0")) for a in arrivals]
            out.append(megha(one, [flat], alone, "centralized 1GMx1LM", measured))
        elif name == "sparrow":
            cfg = SparrowConfig(probes=probes, net_base_s=config.net_base_s, sched_handler_s=config.gm_handler_s,
                                seed=config.seed)
            out.append(sparrow(cfg, flat, arrivals))
        else:
            raise ValueError(f"unknown system {name!r}; allowed: {', '.join(SYSTEMS)}")
    return out
