"""What MCH's exact answers cost at the least, beside flat DRF's decision (issue 38).

Each job that ends or is blocked needs two things a DRF decision has not: eq. 2 carried up
its path with the float operations the reference does (scheduler/mchpropagate.py), and a
new F for the subtree of the highest queue whose mu moved (the factor walk). This bench
runs `mch` on bench/fairness.py's workloads, keeps the input of every propagation and of
every walk, and replays each alone on a copy of the state it had, fastest of --repeat:
the products of the walk alone, without re-keying anything. Their sum per decision is a
floor of what MCH adds; 2x of DRF leaves DRF's own time per decision for all of it.

    .venv/bin/python bench/mch_floor.py [--levels 3,4,5] [--jobs 100,1000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.fairness import binary_tree, google_jobs, pool, timed_round  # noqa: E402
from bench.quick import parse_args as parse_quick  # noqa: E402
from tcluster.scheduler.fairness import make_fairness  # noqa: E402
from tcluster.scheduler.mch import MchState, _MchRound  # noqa: E402


class _Recording(MchState):
    """MchState that keeps the input of each propagation and each walk, for the replay."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.propagations: list[tuple[Any, ...]] = []
        self.walks: list[tuple[int, list[float], list[float]]] = []

    def _propagate_pair(self, node: int, d0: float, d1: float, count_delta: int) -> None:
        self.propagations.append((node, d0, d1, count_delta, list(self._sum), list(self._count),
                                  list(self._mu), list(self._norm)))
        super()._propagate_pair(node, d0, d1, count_delta)

    def _recompute_factors(self, top: int) -> None:
        self.walks.append((top, list(self._factor), list(self._mu)))
        super()._recompute_factors(top)


def propagation_s(state: _Recording, repeat: int) -> float:
    total = 0.0
    for node, d0, d1, count_delta, sums, counts, mus, norms in state.propagations:
        best = float("inf")
        for _ in range(repeat):
            copy = MchState.__new__(MchState)   # only what eq. 2 reads and writes
            copy.index, copy._sum, copy._count, copy._mu = state.index, list(sums), list(counts), list(mus)
            copy._norm, copy._stale_factor = list(norms), set()
            start = time.perf_counter()
            copy._propagate_pair(node, d0, d1, count_delta)
            best = min(best, time.perf_counter() - start)
        total += best
    return total


def products_s(state: _Recording, repeat: int) -> float:
    """The walk's products alone: F = F(parent) x mu / weight down the subtree."""
    total = 0.0
    for top, factor, mus in state.walks:
        if top < len(state._below):
            walk = state._below[top]
        else:   # a queue made after the tree: the walk is that queue alone
            walk = ((top, state.index.parent[top], state.index.weight[top]),)
        best = float("inf")
        for _ in range(repeat):
            f = list(factor)
            start = time.perf_counter()
            for node, up, w in walk:
                f[node] = f[up] * mus[node] / w
            best = min(best, time.perf_counter() - start)
        total += best
    return total


def drf_per_decision(jobs: list[Any], tree: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        spent, picks = timed_round(make_fairness("drf").start_round(jobs, pool(), tree), jobs, pool(), 20000)
        best = min(best, spent / max(1, len(picks)))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="3,4,5")
    parser.add_argument("--jobs", default="100,1000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parse_quick(parser, {"levels": "3", "jobs": "100", "repeat": 1}, argv)
    print(f"{'levels':>6} {'jobs':>6} {'decisions':>9} {'ends':>5} {'eq.2 us/end':>11} {'F us/walk':>9} "
          f"{'floor us/dec':>12} {'drf us/dec':>10} {'floor of 2x budget':>18}")
    for levels in (int(x) for x in args.levels.split(",")):
        tree = binary_tree(levels)
        for count in (int(x) for x in args.jobs.split(",")):
            jobs = google_jobs(count, tree.leaves, random.Random(1))
            state = _Recording(tree, pool())
            state.sync(jobs)
            state.propagations.clear()
            state.walks.clear()
            _, picks = timed_round(_MchRound(state, jobs), jobs, pool(), 20000)
            decisions = max(1, len(picks))
            eq2, walks = propagation_s(state, args.repeat), products_s(state, args.repeat)
            floor = (eq2 + walks) / decisions
            drf = drf_per_decision(jobs, tree, args.repeat)
            ends = max(1, len(state.propagations))
            print(f"{levels:>6} {count:>6} {decisions:>9} {len(state.propagations):>5} {eq2 / ends * 1e6:>11.2f} "
                  f"{walks / max(1, len(state.walks)) * 1e6:>9.2f} {floor * 1e6:>12.2f} {drf * 1e6:>10.2f} "
                  f"{floor / drf:>17.0%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
