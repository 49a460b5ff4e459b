"""Megha's claims K4, K7 and K8 (notes/megha.md §5) in the federation simulator, beside
the `tcl sim examples/megha-federation.yaml` run that gives K1-K3:

    python -m bench.megha                 # ~10 min on 2 busy cores
    python -m bench.megha --scale 10      # 1/10 of the sizes, for a look
    python -m bench.megha --quick         # toy sizes (1/100), a smoke run

K4: 10 GM x 10 LM over 1,000 -> 5,000 -> 10,000 workers (10 tasks per worker).
K7: (a) internal inconsistencies with repartition off at 10,000 workers; (c) the rate
of failed verifications over all verifications against the heartbeat (1, 10, 30 s).
K8: every run's LM ledger replayed: no node overcommitted in any dimension, every task
on a node with its constraints, every task launched exactly once."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402

from tcluster.federation.messages import satisfies
from tcluster.sim.federation.compare import draw
from tcluster.sim.federation.report import summarize
from tcluster.sim.federation.sim import FedConfig, FedSimRun, FederationSim
from tcluster.sim.federation.workload import WorkloadSpec

SPEC = WorkloadSpec(load=0.9, mean_duration_s=100.0, constrained=0.5)


def k8(run: FedSimRun) -> bool:
    used: dict[tuple[int, int], list[int]] = {}
    held: dict[str, tuple[int, int, tuple[int, ...]]] = {}
    for kind, lm, node, task_id, req in run.ledger:
        spec = run.clusters[lm][node]
        if kind == "commit":
            if task_id in held or not satisfies(spec.cmask, run.pcs[task_id]):
                return False
            held[task_id] = (lm, node, req)
            used[(lm, node)] = [u + r for u, r in zip(used.get((lm, node), [0, 0]), req)]
            if any(u > c for u, c in zip(used[(lm, node)], spec.cap)):
                return False
        else:
            lm_, node_, req_ = held.pop(task_id)
            used[(lm_, node_)] = [u - r for u, r in zip(used[(lm_, node_)], req_)]
    return not held and all(n == 1 for n in run.launches.values()) and len(run.launches) == len(run.records)


def one(cfg: FedConfig, per_worker: int) -> tuple[FedSimRun, float]:
    spec = replace(SPEC, tasks=per_worker * cfg.workers)
    clusters, arrivals = draw(cfg.workers, cfg.lms, cfg.gms, cfg.queues_per_gm, spec, cfg.seed)
    began = time.perf_counter()
    run = FederationSim(cfg, clusters, arrivals).simulate()
    return run, time.perf_counter() - began


def row(label: str, run: FedSimRun, wall: float) -> str:
    s = summarize(run)
    stats = run.gm_stats
    tried = sum(x.launches + x.internal_inconsistencies + x.external_inconsistencies + x.refused for x in stats)
    failed = sum(x.internal_inconsistencies + x.external_inconsistencies for x in stats)
    p50, p99, mx = s.alloc_ms
    return (f"| {label} | {s.placed}/{len(run.records)} | {s.peak_busy:.1%} | {p50:.2f} | {p99:.2f} | {mx:.2f} "
            f"| {s.per_1000['internal inconsistencies']:.2f} | {s.per_1000['external inconsistencies']:.2f} "
            f"| {s.per_1000['repartitions']:.2f} | {failed / max(tried, 1):.3%} | {'yes' if k8(run) else 'NO'} "
            f"| {wall:.0f} s |")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.megha")
    p.add_argument("--scale", type=int, default=1, help="sizes / N (10: for a look)")
    p.add_argument("--per-worker", type=int, default=10)
    a = parse_quick(p, {"scale": 100, "per_worker": 5})
    scale = a.scale
    big = 10_000 // scale
    print("| run | placed | peak busy | p50 ms | p99 ms | max ms | internal inc./1k | external inc./1k "
          "| repart./1k | failed verif. | K8 | sim wall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = FedConfig(lms=10, gms=10, heartbeat_s=10.0, seed=1)
    for workers in (1_000 // scale, 5_000 // scale, big):                                  # K4
        print(row(f"K4 10x10, {workers} workers", *one(replace(base, workers=workers), a.per_worker)), flush=True)
    print(row(f"K7a repartition off, {big} workers",
              *one(replace(base, workers=big, repartition=False), a.per_worker)), flush=True)
    for beat in (1.0, 30.0):                                                              # K7c (10 s is K4's last)
        print(row(f"K7c heartbeat {beat:g} s, {big} workers",
                  *one(replace(base, workers=big, heartbeat_s=beat), a.per_worker)), flush=True)


if __name__ == "__main__":
    main()
