"""Packing quality of the placement policies, as TCluster's section 5.2 measures it:
a stream of tasks whose total fits the cluster in aggregate (like Table 2 on Table 1:
90% of the CPU, 95% of the memory) is placed in arrival order with no departures, so
every task left pending is lost to fragmentation. For each policy: how many tasks are
left pending, and the cluster's utilization (avg of CPU and memory, the paper's
avg_util) when the first task goes pending (at the end if none does). Many seeded
trials, all policies on the same clusters and task streams, in one run.

Two families of generated clusters and workloads:
  tcluster  5-10 servers shaped like the paper's Table 1 (3-8 cores, 1-8 GiB) with
            jobs in the ranges of its Table 2 (0.5-3 cores, 300-1500 MiB)
  lotes     30-60 machines with the LoTES Table 1 shapes and tasks from its Table 2
            classes, scaled up 4x so that fragments matter

    .venv/bin/python bench/packing.py [--trials 200]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from bench.workloads import LOTES_JOB_CLASSES, LOTES_MACHINES, MAX_CORES, MAX_MEMORY  # noqa: E402
from tcluster.domain.resources import Resources  # noqa: E402
from tcluster.scheduler.nodestate import NodeMatrix  # noqa: E402
from tcluster.scheduler.placement import PLACEMENT_POLICIES, make_placement  # noqa: E402
from tcluster.scheduler.lotes.classes import learn_classes  # noqa: E402
from tcluster.scheduler.lotes.resolve import plan_for  # noqa: E402

MiB = 2**20
FILL = 0.95   # the stream asks for this much of the cluster's capacity in its scarcest resource


@dataclass(frozen=True)
class Outcome:
    pending: int
    util_at_first_pending: float


def tcluster_family(rng: random.Random) -> tuple[list[Resources], list[Resources]]:
    nodes = [Resources(rng.choice([3.8, 3.8, 5.8, 7.8]), rng.choice([1847, 1851, 3900, 7900]) * MiB)
             for _ in range(rng.randint(5, 10))]
    tasks = [Resources(round(rng.uniform(0.5, 3.0), 1), rng.randrange(300, 1501, 100) * MiB) for _ in range(400)]
    return nodes, tasks


def lotes_family(rng: random.Random) -> tuple[list[Resources], list[Resources]]:
    weights = [count for count, _, _ in LOTES_MACHINES]
    shapes = rng.choices(LOTES_MACHINES, weights, k=rng.randint(30, 60))
    nodes = [Resources(cores * MAX_CORES, int(memory * MAX_MEMORY)) for _, cores, memory in shapes]
    classes = rng.choices(LOTES_JOB_CLASSES, [share for _, _, share in LOTES_JOB_CLASSES], k=3000)
    tasks = [Resources(round(min(1.0, max(0.01, rng.gauss(4 * c, 2 * c))) * MAX_CORES, 2),
                       int(min(1.0, max(0.005, rng.gauss(4 * m, 2 * m))) * MAX_MEMORY)) for c, m, _ in classes]
    return nodes, tasks


def fitting_prefix(nodes: list[Resources], tasks: list[Resources]) -> list[Resources]:
    """The longest prefix whose total stays within FILL x capacity in every resource."""
    cap = sum(nodes, Resources())
    total, stream = Resources(), []
    for task in tasks:
        if (total + task).dominant_share(cap) > FILL:
            break
        stream.append(task)
        total = total + task
    return stream


def pack(policy: str, nodes: list[Resources], tasks: list[Resources], seed: int) -> Outcome:
    matrix = NodeMatrix()
    for i, capacity in enumerate(nodes):
        matrix.upsert(f"n{i:03d}", capacity, {})
    chooser, rng, view = make_placement(policy), random.Random(seed), matrix.view()
    if getattr(chooser, "book", None) is not None:   # lotes: classes by k-means over the stream
        classes = learn_classes([view.request_vector(t) for t in tasks], view.scale, 4, random.Random(seed))
        outcome = plan_for([(n, c, {}) for n, c in zip(matrix.names, nodes)], matrix.kinds, classes)
        chooser.book.adopt(outcome.plan) if outcome.plan else chooser.book.drop(outcome.reason)
        chooser.begin_round()   # one round: the policy counts its own choices
    pending, util = 0, None
    for task in tasks:
        row = chooser.choose(view.request_vector(task), view, None, rng)
        if row is None:
            pending += 1
            util = utilization(view) if util is None else util
        else:
            matrix.allocate(view.names[row], task)
    return Outcome(pending, util if util is not None else utilization(view))


def utilization(view) -> float:  # type: ignore[no-untyped-def]
    used = (view.capacity - view.free).sum(axis=0) / view.capacity.sum(axis=0)
    return float(used[:2].mean())   # avg_util = 0.5 * cpu_util + 0.5 * mem_util


def run_family(name: str, family, trials: int, seed: int) -> None:  # type: ignore[no-untyped-def]
    policies = sorted(PLACEMENT_POLICIES)
    results: dict[str, list[Outcome]] = {p: [] for p in policies}
    for trial in range(trials):
        rng = random.Random(f"{seed}-{name}-{trial}")
        nodes, tasks = family(rng)
        stream = fitting_prefix(nodes, tasks)
        for policy in policies:
            results[policy].append(pack(policy, nodes, stream, seed + trial))
    sizes = [len(fitting_prefix(*family(random.Random(f"{seed}-{name}-{t}")))) for t in range(min(trials, 5))]
    print(f"\n{name}: {trials} trials, streams of ~{statistics.mean(sizes):.0f} tasks filling {FILL:.0%} of the cluster")
    print(f"{'policy':>10} {'pending mean':>13} {'util@first':>11}  {'anbf fewer / tie / more pending'}")
    anbf = results["anbf"]
    for policy in sorted(policies, key=lambda p: statistics.mean(o.pending for o in results[p])):
        outs = results[policy]
        fewer = sum(a.pending < o.pending for a, o in zip(anbf, outs))
        more = sum(a.pending > o.pending for a, o in zip(anbf, outs))
        versus = "" if policy == "anbf" else f"{fewer:>4} / {trials - fewer - more:>4} / {more:>4}"
        print(f"{policy:>10} {statistics.mean(o.pending for o in outs):>13.2f} "
              f"{statistics.mean(o.util_at_first_pending for o in outs):>10.1%}  {versus}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parse_quick(parser, {"trials": 4})
    run_family("tcluster", tcluster_family, args.trials, args.seed)
    run_family("lotes", lotes_family, max(1, args.trials // 4), args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
