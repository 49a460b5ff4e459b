"""The federation simulation's table: allocation time p50/p99/max and its components,
inconsistencies and repartitions per 1,000 tasks; and the entry point

    python -m tcluster.federation.sim --lms 3 --gms 3 --workers 300 --tasks 4550

(`tcl sim` runs a `federation:` scenario against its baselines: federation/compare.py)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

from tcluster.federation.sim import FedConfig, FedRun, simulate
from tcluster.federation.workload import WorkloadSpec


@dataclass(frozen=True)
class Summary:
    placed: int
    unplaced: int
    alloc_ms: tuple[float, float, float]           # p50, p99, max
    parts_ms: dict[str, tuple[float, float, float]]
    shares: dict[str, float]                        # each component's share of the total
    per_1000: dict[str, float]
    peak_busy: float                                # the largest share of cores held at once


def pcts(values: np.ndarray) -> tuple[float, float, float]:
    if values.size == 0:
        return (float("nan"),) * 3
    p50, p99 = np.percentile(values, [50, 99])
    return float(p50) * 1e3, float(p99) * 1e3, float(values.max()) * 1e3


def peak_busy(run: FedRun) -> float:
    """Replays the LMs' commits and releases: the most cores held at any moment."""
    held: dict[str, int] = {}
    busy = peak = 0
    for kind, _lm, _node, task_id, req in run.ledger:
        if kind == "commit":
            held[task_id] = req[0]
            busy += req[0]
            peak = max(peak, busy)
        else:
            busy -= held.pop(task_id)
    total = sum(n.cap[0] for nodes in run.clusters for n in nodes)
    return peak / total if total else 0.0


def summarize(run: FedRun) -> Summary:
    started = [r for r in run.records.values() if r.start is not None]
    alloc = np.array([r.start - r.arrival for r in started])
    proc = np.array([r.processing for r in started])
    comm = np.array([r.communication for r in started])
    queue = np.maximum(alloc - proc - comm, 0.0)     # float dust, not negative waits
    total = float(alloc.sum()) or 1.0
    n = max(len(run.records), 1)
    stats = run.gm_stats
    counts = {
        "internal inconsistencies": sum(s.internal_inconsistencies for s in stats),
        "external inconsistencies": sum(s.external_inconsistencies for s in stats),
        "repartitions": sum(s.repartitions for s in stats),
        "preemptions": sum(s.preemptions for s in stats),
        "refused (stale epoch)": sum(s.refused for s in stats),
    }
    return Summary(
        placed=len(started), unplaced=len(run.records) - len(started), alloc_ms=pcts(alloc),
        parts_ms={"queuing": pcts(queue), "processing": pcts(proc), "communication": pcts(comm)},
        shares={"queuing": float(queue.sum()) / total, "processing": float(proc.sum()) / total,
                "communication": float(comm.sum()) / total},
        per_1000={k: 1000.0 * v / n for k, v in counts.items()},
        peak_busy=peak_busy(run),
    )


def format_summary(s: Summary, cfg: FedConfig, spec: WorkloadSpec, wall_s: float) -> str:
    lines = [
        f"Megha federation: {cfg.lms} LMs x {cfg.gms} GMs, {cfg.workers} workers, {spec.tasks} tasks "
        f"(load {spec.load:.0%}, seed {cfg.seed}, repartition {'on' if cfg.repartition else 'off'}, "
        f"preemption {'on' if cfg.preemption else 'off'}); "
        f"simulated in {wall_s:.1f} s",
        f"placed {s.placed}, never placed {s.unplaced}; peak cores held {s.peak_busy:.1%}",
        "",
        f"{'allocation time (ms)':<24}{'p50':>10}{'p99':>10}{'max':>10}{'share':>8}",
        f"{'total':<24}" + "".join(f"{v:>10.2f}" for v in s.alloc_ms) + f"{'100%':>8}",
    ]
    for name, vals in s.parts_ms.items():
        lines.append(f"  {name:<22}" + "".join(f"{v:>10.2f}" for v in vals) + f"{s.shares[name]:>8.1%}")
    lines.append(f"  {'worker queuing':<22}" + f"{0.0:>10.2f}" * 3 + f"{0.0:>8.1%}")
    lines += ["", f"{'per 1,000 tasks':<28}"]
    lines += [f"  {k:<26}{v:>8.1f}" for k, v in s.per_1000.items()]
    return "\n".join(lines)


def parse(argv: list[str] | None) -> tuple[FedConfig, WorkloadSpec]:
    p = argparse.ArgumentParser(prog="python -m tcluster.federation.sim",
                                description="Simulate a Megha federation (issue 25) on a synthetic workload.")
    p.add_argument("--lms", type=int, default=3)
    p.add_argument("--gms", type=int, default=3)
    p.add_argument("--workers", type=int, default=300)
    p.add_argument("--tasks", type=int, default=4550)
    p.add_argument("--load", type=float, default=0.9, help="offered share of the cores (default 0.9)")
    p.add_argument("--mean-duration", type=float, default=10.0, help="seconds (Pareto, alpha 1.5)")
    p.add_argument("--constrained", type=float, default=0.5, help="share of tasks with constraints")
    p.add_argument("--heartbeat", type=float, default=10.0, help="LM -> GM full state period, seconds")
    p.add_argument("--queues-per-gm", type=int, default=1)
    p.add_argument("--no-repartition", action="store_true")
    p.add_argument("--preemption", action="store_true", help="Alg. 2 with equal shares over all queues")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    cfg = FedConfig(lms=a.lms, gms=a.gms, workers=a.workers, queues_per_gm=a.queues_per_gm,
                    heartbeat_s=a.heartbeat, repartition=not a.no_repartition,
                    preemption=a.preemption, seed=a.seed)
    spec = WorkloadSpec(tasks=a.tasks, load=a.load, mean_duration_s=a.mean_duration, constrained=a.constrained)
    return cfg, spec


def main(argv: list[str] | None = None) -> int:
    cfg, spec = parse(argv)
    began = time.perf_counter()
    run = simulate(cfg, spec)
    print(format_summary(summarize(run), cfg, spec, time.perf_counter() - began))
    return 0


if __name__ == "__main__":
    sys.exit(main())
