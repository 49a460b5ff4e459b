"""Per-decision time of `drf`, `hdrf` and `mch`, side by side in one run (MCH, Figure 5).

Setup, as in the paper: full binary queue trees of 2 to 5 levels below the root, with
100 to 10,000 jobs spread over the leaf queues. Demands follow the Google trace's job
classes (LoTES Table 2, the same data bench/placement.py uses), jittered. One job in 20
asks for memory only, so the partial-type path runs too. Each job has 1 to 200 tasks
(heavy-tailed). The pool is the trace's 12,583 machines, normalized. Each run starts a
round (the O(q) flattening, timed apart as `setup`) and fills the pool decision by
decision: pick, place, tell the policy the room left. The clock runs only around the
policy's calls, not around this harness. hdrf costs O(q) per pick, so it gets fewer
decisions (--hdrf-decisions). Per-decision times are averages over the decisions each
policy made, from the same start; each cell is the fastest of --repeat runs.

    .venv/bin/python bench/fairness.py [--levels 2,3,4,5] [--jobs 100,1000,10000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from bench.workloads import LOTES_JOB_CLASSES, LOTES_MACHINES  # noqa: E402
from tcluster.domain.resources import Resources  # noqa: E402
from tcluster.scheduler.fairness import make_fairness  # noqa: E402
from tcluster.scheduler.queues import QueueNode, QueueTree  # noqa: E402
from tcluster.scheduler.views import JobView  # noqa: E402

SCALE = 1000.0   # normalized shares -> whole numbers big enough for fractional tasks


def binary_tree(levels: int) -> QueueTree:
    def node(path: str, depth: int) -> QueueNode:
        children = () if depth == levels else tuple(
            node(f"{path}.q{i}" if path else f"q{i}", depth + 1) for i in range(2))
        return QueueNode(path.rpartition(".")[2], path, 1.0, children)
    return QueueTree(node("", 0), f"binary-{levels}")


def google_jobs(count: int, leaves: tuple[str, ...], rng: random.Random) -> list[JobView]:
    classes = [(cpu, mem) for cpu, mem, _ in LOTES_JOB_CLASSES]
    weights = [share for _, _, share in LOTES_JOB_CLASSES]
    jobs = []
    for i in range(count):
        cpu, mem = rng.choices(classes, weights)[0]
        cpu, mem = cpu * rng.uniform(0.5, 1.5), mem * rng.uniform(0.5, 1.5)
        if i % 20 == 19:
            cpu = 0.0   # partial-type: memory only
        tasks = min(200, int(rng.paretovariate(1.2)))
        jobs.append(JobView(f"j{i}", leaves[i % len(leaves)], float(i), Resources(cpu * SCALE, int(mem * SCALE)), tasks))
    return jobs


def pool() -> Resources:
    cpu = sum(n * c for n, c, _ in LOTES_MACHINES)
    mem = sum(n * m for n, _, m in LOTES_MACHINES)
    return Resources(cpu * SCALE, int(mem * SCALE))


def run(policy: str, jobs: list[JobView], capacity: Resources, tree: QueueTree, most: int) -> tuple[float, float, int]:
    """(setup seconds, seconds in the policy's calls, decisions)."""
    start = time.perf_counter()
    rnd = make_fairness(policy).start_round(jobs, capacity, tree)
    setup = time.perf_counter() - start
    spent, picks = timed_round(rnd, jobs, capacity, most)
    return setup, spent, len(picks)


def timed_round(rnd: Any, jobs: list[JobView], capacity: Resources, most: int) -> tuple[float, list[str]]:
    """Drives a started round over one pool of `capacity` for at most `most` decisions: the
    seconds spent in the round's own calls (next_job, skip, placed, limit), and its picks."""
    demand = {j.job_id: (j.demand.cpu, j.demand.memory) for j in jobs}
    free_cpu, free_mem = capacity.cpu, capacity.memory
    spent, picks = 0.0, []
    while len(picks) < most:
        t0 = time.perf_counter()
        job = rnd.next_job()
        t1 = time.perf_counter()
        if job is None:
            break
        picks.append(job)
        cpu, mem = demand[job]
        if cpu > free_cpu or mem > free_mem:
            t2 = time.perf_counter()
            rnd.skip(job)
        else:
            free_cpu, free_mem = free_cpu - cpu, free_mem - mem
            room = Resources(free_cpu, int(free_mem))
            t2 = time.perf_counter()
            rnd.placed(job)
            rnd.limit(room)
        spent += (t1 - t0) + (time.perf_counter() - t2)
    return spent, picks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="2,3,4,5")
    parser.add_argument("--jobs", default="100,1000,10000")
    parser.add_argument("--decisions", type=int, default=20000, help="at most, for drf and mch")
    parser.add_argument("--hdrf-decisions", type=int, default=300, help="at most, for hdrf (O(q) each)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell; the fastest counts (noisy machine)")
    args = parse_quick(parser, {"levels": "2", "jobs": "100", "decisions": 500, "hdrf_decisions": 50, "repeat": 1}, argv)
    capacity = pool()
    print(f"pool: {capacity.cpu:.0f} cpu units, {capacity.memory} memory units (Google trace machines x {SCALE:g})")
    header = (f"{'levels':>6} {'jobs':>6} {'decisions':>9} {'setup ms drf/hdrf/mch':>22} "
              f"{'drf us':>8} {'hdrf us':>9} {'mch us':>8} {'hdrf/mch':>9} {'mch/drf':>8} {'mch dec/s':>10}")
    print(header)
    for levels in (int(x) for x in args.levels.split(",")):
        tree = binary_tree(levels)
        for count in (int(x) for x in args.jobs.split(",")):
            jobs = google_jobs(count, tree.leaves, random.Random(args.seed))
            results = {}
            for _ in range(args.repeat):   # interleaved, so a noisy moment hits every policy alike
                for p in ("drf", "hdrf", "mch"):
                    got = run(p, jobs, capacity, tree, args.hdrf_decisions if p == "hdrf" else args.decisions)
                    best = results.get(p)
                    results[p] = got if best is None or got[1] / got[2] < best[1] / best[2] else best
            per = {p: spent / max(n, 1) for p, (_, spent, n) in results.items()}
            setups = "/".join(f"{results[p][0] * 1e3:.1f}" for p in ("drf", "hdrf", "mch"))
            print(f"{levels:>6} {count:>6} {results['mch'][2]:>9} {setups:>22} {per['drf'] * 1e6:>8.2f} "
                  f"{per['hdrf'] * 1e6:>9.1f} {per['mch'] * 1e6:>8.2f} {per['hdrf'] / per['mch']:>8.0f}x "
                  f"{per['mch'] / per['drf']:>7.2f}x {1 / per['mch']:>10.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
