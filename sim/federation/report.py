"""The federation simulation's summary: allocation time p50/p99/max and its components,
inconsistencies, repartitions and preemptions per 1,000 tasks, and the peak share of
cores held (bench/megha.py's rows). `tcl sim` gives these figures for a `federation:`
scenario (sim/federation/scenario.py; `-o json` for every count per 1,000 tasks), beside
its baselines (sim/federation/compare.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tcluster.sim.federation.sim import FedSimRun


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


def peak_busy(run: FedSimRun) -> float:
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


def summarize(run: FedSimRun) -> Summary:
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
