"""The federation simulator's two engines side by side on one draw (issue 38): the object
engine (per-node tuples: every state a tuple of all nodes, every view applied node by node,
Alg. 1's first fit walked in Python) and the array engine (sim/federation/arrays.py: the
same GM and LM code over numpy columns). Each engine runs in a child process of its own, so
that its peak RSS is its own; both run with constant handler times (measured ones are wall-clock
figures, different in each run), and the bench checks
that they give the same placements: the same commit/release ledger and the same start time
of every task, compared as digests. CPU seconds stand beside wall ones: the machine is shared.

    python -m bench.federation_sim                      # 1,000 and 2,000 workers, both systems
    python -m bench.federation_sim --workers 10000 --engines array --systems centralized
    python -m bench.federation_sim --quick              # toy sizes, every LM on arrays: a smoke run"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.quick import parse_args as parse_quick  # noqa: E402
from tcluster.sim.federation import arrays  # noqa: E402
from tcluster.sim.federation.compare import draw  # noqa: E402
from tcluster.sim.federation.sim import FedConfig, FederationSim  # noqa: E402
from tcluster.sim.federation.workload import Arrival, WorkloadSpec  # noqa: E402

ENGINES = ("object", "array")


def one(engine: str, system: str, workers: int, per_worker: int, array_min_nodes: int) -> dict[str, object]:
    """One engine on examples/megha-federation.yaml's draw at `workers`: wall, peak RSS, digest."""
    arrays.ARRAY_MIN_NODES = array_min_nodes
    spec = WorkloadSpec(tasks=per_worker * workers, load=0.9, mean_duration_s=100.0, constrained=0.5)
    config = FedConfig(lms=10, gms=10, workers=workers, heartbeat_s=10.0, seed=1, engine=engine)
    clusters, arrivals = draw(workers, 10, 10, 1, spec, config.seed)
    if system == "centralized":          # compare.py's 1 GM x 1 LM over the same nodes
        config = replace(config, lms=1, gms=1)
        clusters = [tuple(n for nodes in clusters for n in nodes)]
        arrivals = [Arrival(a.t, "q0.0", replace(a.task, queue="q0.0")) for a in arrivals]
    began, cpu = time.perf_counter(), time.process_time()
    run = FederationSim(config, clusters, arrivals).simulate()
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    starts = sorted((k, r.start) for k, r in run.records.items())
    digest = hashlib.sha256(repr((run.ledger, starts)).encode()).hexdigest()[:16]
    placed = sum(1 for r in run.records.values() if r.start is not None)
    return {"wall_s": wall, "cpu_s": cpu, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "digest": digest, "placed": placed, "tasks": len(arrivals)}


def child(engine: str, system: str, workers: int, per_worker: int, array_min_nodes: int) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-m", "bench.federation_sim", "--child", engine, "--systems", system,
                          "--workers", str(workers), "--per-worker", str(per_worker),
                          "--array-min-nodes", str(array_min_nodes)],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.federation_sim")
    p.add_argument("--workers", default="1000,2000", help="comma-separated worker counts")
    p.add_argument("--per-worker", type=int, default=10, help="tasks per worker (the example's 10)")
    p.add_argument("--systems", default="megha,centralized", help="megha (10 GMs x 10 LMs), centralized (1x1)")
    p.add_argument("--engines", default="object,array", help="one alone: its figures, no comparison")
    p.add_argument("--array-min-nodes", type=int, default=arrays.ARRAY_MIN_NODES,
                   help="LMs this large or larger take arrays in the array engine (sim/federation/arrays.py)")
    p.add_argument("--child", choices=ENGINES, help=argparse.SUPPRESS)
    a = parse_quick(p, {"workers": "100", "per_worker": 5, "array_min_nodes": 1})
    if a.child:
        print(json.dumps(one(a.child, a.systems, int(a.workers), a.per_worker, a.array_min_nodes)))
        return 0
    engines = a.engines.split(",")
    print("| system | workers | tasks | placed | " + " | ".join(f"{e} CPU s | {e} wall s | {e} MB" for e in engines)
          + " | object / array (CPU) | same placements |")
    print("|---|---|---|---|" + "---|---|---|" * len(engines) + "---|---|")
    same_all = True
    for system in a.systems.split(","):
        for workers in (int(w) for w in a.workers.split(",")):
            got = {e: child(e, system, workers, a.per_worker, a.array_min_nodes) for e in engines}
            first = got[engines[0]]
            cells = " | ".join(f"{got[e]['cpu_s']:.2f} | {got[e]['wall_s']:.2f} | {got[e]['rss_mb']:.0f}" for e in engines)
            if len(got) == 2:
                ratio = f"{float(got['object']['cpu_s']) / max(float(got['array']['cpu_s']), 1e-9):.2f}x"  # type: ignore[arg-type]
                same = len({str(r["digest"]) for r in got.values()}) == 1
                same_all &= same
                verdict = "yes" if same else "NO"
            else:
                ratio, verdict = "-", "-"
            print(f"| {system} | {workers} | {first['tasks']} | {first['placed']} | {cells} | {ratio} | {verdict} |",
                  flush=True)
    print(f"engines agree: {'yes' if same_all else 'NO'}")
    return 0 if same_all else 1


if __name__ == "__main__":
    sys.exit(main())
