"""Placements per second for every policy at 100, 1,000 and 10,000 nodes, against a
plain-Python loop reference that makes the same decisions, side by side in one run.

The cluster follows the LoTES paper's Table 1 shapes; tasks follow its Table 2 classes
and 20% carry constraints. The stream keeps the cluster busy but not full: after each
placement one earlier task may finish. Both sides replay the same operations; their
decisions are compared and must be identical (lotes has no loop reference: it follows a
plan solved for the cluster with Table 2's classes, and the book is told of every start
and end as the master would). Last, the offline solve time (both LPs and the bins) for
Table 1's ten configurations at full scale and 4-9 classes.

The second table places jobs instead of single tasks: each request is a job of 1-200
identical tasks (heavy-tailed, most have 1-3: bench/workloads.trace_job_sizes), placed
with `choose_each` (anbf: one pass over the nodes per job, then one argmin per task),
against the loop reference called once per task. Tasks end between jobs.

    .venv/bin/python bench/placement.py [--decisions 4000] [--sizes 100,1000,10000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from bench.workloads import BenchNode, BenchTask, lotes_cluster, lotes_tasks, trace_job_sizes  # noqa: E402
from tcluster.domain.constraints import parse_constraints  # noqa: E402
from tcluster.scheduler.matching import EligibleCache  # noqa: E402
from tcluster.scheduler.nodestate import NodeMatrix  # noqa: E402
from tcluster.scheduler.placement import PLACEMENT_POLICIES, make_placement  # noqa: E402
from testkit.placement_reference import reference_choose  # noqa: E402
from bench.workloads import LOTES_JOB_CLASSES, LOTES_MACHINES, MAX_CORES, MAX_MEMORY  # noqa: E402
from tcluster.scheduler.lotes.lp import solve  # noqa: E402
from tcluster.scheduler.lotes.model import Configuration, JobClass, Problem  # noqa: E402
from tcluster.scheduler.lotes.resolve import plan_for  # noqa: E402

FINISH_PROBABILITY = 0.9   # per placement: one running task ends, so the cluster stays busy


def run_vectorized(policy: str, nodes: list[BenchNode], tasks: list[BenchTask],
                   seed: int) -> tuple[list, float, float]:
    """Decisions, seconds spent placing (mask, decision, allocation), and seconds spent
    in the policy alone. Task completions (the churn) happen between placements and are
    not timed: they are not part of placing a task."""
    matrix = NodeMatrix()
    for node in nodes:
        matrix.upsert(node.name, node.capacity, node.labels)
    chooser, cache, rng, churn = make_placement(policy), EligibleCache(), random.Random(seed), random.Random(seed + 1)
    view, running, decisions, in_policy, placing = matrix.view(), [], [], 0.0, 0.0
    book = getattr(chooser, "book", None)
    if book is not None:
        book.adopt(lotes_plan(nodes, matrix.kinds))
    for task in tasks:
        start = time.perf_counter()
        eligible = cache.eligible(parse_constraints(task.constraints), matrix)
        request = view.request_vector(task.request)
        before = time.perf_counter()
        row = chooser.choose(request, view, eligible, rng)
        in_policy += time.perf_counter() - before
        decisions.append(row)
        if row is not None:
            matrix.allocate(view.names[row], task.request)
            running.append((view.names[row], task.request))
            if book is not None:   # the master tells the book on commit
                book.started(view.names[row], book.classify(request))
        placing += time.perf_counter() - start
        if running and churn.random() < FINISH_PROBABILITY:
            name, request = running.pop(churn.randrange(len(running)))
            matrix.release(name, request)
            if book is not None:
                book.ended(name, book.classify(view.request_vector(request)))
    return decisions, placing, in_policy


def run_jobs(policy: str, nodes: list[BenchNode], jobs: list[tuple[BenchTask, int]],
             seed: int) -> tuple[list, float]:
    """Each job's tasks through choose_each; (decisions, seconds placing). A job stops at
    its first task that fits nowhere. After each job, as many churn draws as it had tasks."""
    matrix = NodeMatrix()
    for node in nodes:
        matrix.upsert(node.name, node.capacity, node.labels)
    chooser, cache, rng, churn = make_placement(policy), EligibleCache(), random.Random(seed), random.Random(seed + 1)
    view, running, decisions, placing = matrix.view(), [], [], 0.0
    book = getattr(chooser, "book", None)
    if book is not None:
        book.adopt(lotes_plan(nodes, matrix.kinds))
    for task, count in jobs:
        start = time.perf_counter()
        eligible = cache.eligible(parse_constraints(task.constraints), matrix)
        request = view.request_vector(task.request)
        rows = chooser.choose_each(request, view, eligible, rng)
        for _ in range(count):
            row = next(rows)
            decisions.append(row)
            if row is None:
                break
            matrix.allocate(view.names[row], task.request)
            running.append((view.names[row], task.request))
            if book is not None:
                book.started(view.names[row], book.classify(request))
        placing += time.perf_counter() - start
        _churn(count, running, churn, matrix, book, view)
    return decisions, placing


def _churn(count: int, running: list, churn: random.Random, matrix: NodeMatrix, book, view) -> None:  # type: ignore[no-untyped-def]
    for _ in range(count):
        if running and churn.random() < FINISH_PROBABILITY:
            name, request = running.pop(churn.randrange(len(running)))
            matrix.release(name, request)
            if book is not None:
                book.ended(name, book.classify(view.request_vector(request)))


def run_loop_jobs(policy: str, nodes: list[BenchNode], jobs: list[tuple[BenchTask, int]],
                  seed: int) -> tuple[list, float]:
    """The loop reference, once per task, over the same jobs and churn."""
    kinds = ("cpu", "memory")
    capacity = [[node.capacity.get(k) for k in kinds] for node in nodes]
    allocated = [[0.0 for _ in kinds] for _ in nodes]
    free = [list(row) for row in capacity]
    scale = [max(node.capacity.get(k) for node in nodes) for k in kinds]
    rng, churn, running, decisions = random.Random(seed), random.Random(seed + 1), [], []

    def move(row: int, request: list[float], sign: float) -> None:
        allocated[row] = [a + sign * r for a, r in zip(allocated[row], request)]
        free[row] = [c - a for c, a in zip(capacity[row], allocated[row])]
    start = time.perf_counter()
    for task, count in jobs:
        constraints = parse_constraints(task.constraints)
        eligible = [all(c.holds(node.labels) for c in constraints) for node in nodes]
        request = [task.request.get(k) for k in kinds]
        for _ in range(count):
            row = reference_choose(policy, request, free, scale, eligible, rng)
            decisions.append(row)
            if row is None:
                break
            move(row, request, 1.0)
            running.append((row, request))
        for _ in range(count):
            if running and churn.random() < FINISH_PROBABILITY:
                move(*running.pop(churn.randrange(len(running))), -1.0)
    return decisions, time.perf_counter() - start


def jobs_table(args: argparse.Namespace) -> bool:
    print("\njobs of 1-200 tasks (most 1-3), each placed with choose_each; placements/s counts tasks:")
    print(f"{'nodes':>6} {'policy':>10} {'jobs':>6} {'placements/s':>13} {'loop/s':>9} {'ratio':>7} {'placed':>7}  same")
    for size in (int(s) for s in args.sizes.split(",")):
        rng = random.Random(args.seed)
        nodes = lotes_cluster(size, rng)
        tasks = lotes_tasks(args.decisions, rng)
        jobs = list(zip(tasks, trace_job_sizes(len(tasks), rng)))
        total, cut = 0, 0
        while cut < len(jobs) and total < max(20, args.loop_budget // size):   # the slow loop's share
            total, cut = total + jobs[cut][1], cut + 1
        for policy in args.policies.split(","):
            fast, fast_s = run_jobs(policy, nodes, jobs, args.seed)
            placed = sum(d is not None for d in fast) / len(fast)
            line = f"{size:>6} {policy:>10} {len(jobs):>6} {len(fast) / fast_s:>13,.0f}"
            if policy == "lotes":
                print(f"{line} {'-':>9} {'-':>7} {placed:>6.0%}  n/a", flush=True)
                continue
            slow, slow_s = run_loop_jobs(policy, nodes, jobs[:cut], args.seed)
            same = fast[: len(slow)] == slow
            print(f"{line} {len(slow) / slow_s:>9,.0f} {len(fast) / fast_s / (len(slow) / slow_s):>6.0f}x "
                  f"{placed:>6.0%}  {'yes' if same else 'NO'}", flush=True)
            if not same:
                return False
    return True


def lotes_plan(nodes: list[BenchNode], kinds: list[str]):  # type: ignore[no-untyped-def]
    classes = [JobClass(f"k{i + 1}", (c * MAX_CORES, m * MAX_MEMORY), share)
               for i, (c, m, share) in enumerate(LOTES_JOB_CLASSES)]
    outcome = plan_for([(n.name, n.capacity, n.labels) for n in nodes], kinds, classes)
    assert outcome.plan is not None, outcome.reason
    return outcome.plan


def solve_times(seed: int, max_classes: int = 9) -> None:
    """Both LPs and the bins for Table 1's ten configurations at full scale (12,583
    machines), with Table 2's four classes and with 5-9 classes drawn around them."""
    configs = tuple(Configuration(f"c{j + 1:02d}", (c, m), n) for j, (n, c, m) in enumerate(LOTES_MACHINES))
    rng = random.Random(seed)
    print("\noffline solve (stage 1 + bins + stage 2 + rounding), Table 1's ten configurations:")
    print(f"{'classes':>8} {'bins':>7} {'lambda1*':>12} {'lambda2*':>12} {'seconds':>8}")
    for k in range(4, max_classes + 1):
        base = LOTES_JOB_CLASSES + [rng.choice(LOTES_JOB_CLASSES) for _ in range(k - 4)]
        classes = tuple(JobClass(f"k{i + 1}", (c * rng.uniform(0.7, 1.3) if i >= 4 else c,
                                               m * rng.uniform(0.7, 1.3) if i >= 4 else m), share)
                        for i, (c, m, share) in enumerate(base))
        start = time.perf_counter()
        plan = solve(Problem(("cpu", "memory"), configs, classes))
        took = time.perf_counter() - start
        print(f"{k:>8} {sum(len(b) for b in plan.bins):>7} {plan.lambda1:>12,.1f} {plan.lambda2:>12,.1f} {took:>8.2f}")


def run_loop(policy: str, nodes: list[BenchNode], tasks: list[BenchTask], seed: int) -> tuple[list, float]:
    """The same operations over Python lists, one node at a time."""
    kinds = ("cpu", "memory")
    capacity = [[node.capacity.get(k) for k in kinds] for node in nodes]
    allocated = [[0.0 for _ in kinds] for _ in nodes]   # the matrix's bookkeeping: free = capacity - allocated
    free = [list(row) for row in capacity]
    scale = [max(node.capacity.get(k) for node in nodes) for k in kinds]
    rng, churn, running, decisions = random.Random(seed), random.Random(seed + 1), [], []
    start = time.perf_counter()
    for task in tasks:
        constraints = parse_constraints(task.constraints)
        eligible = [all(c.holds(node.labels) for c in constraints) for node in nodes]
        request = [task.request.get(k) for k in kinds]
        row = reference_choose(policy, request, free, scale, eligible, rng)
        decisions.append(row)
        if row is not None:
            allocated[row] = [a + r for a, r in zip(allocated[row], request)]
            free[row] = [c - a for c, a in zip(capacity[row], allocated[row])]
            running.append((row, request))
        if running and churn.random() < FINISH_PROBABILITY:
            done, request_done = running.pop(churn.randrange(len(running)))
            allocated[done] = [a - r for a, r in zip(allocated[done], request_done)]
            free[done] = [c - a for c, a in zip(capacity[done], allocated[done])]
    return decisions, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decisions", type=int, default=4000, help="placements per policy and size")
    parser.add_argument("--loop-budget", type=int, default=2_000_000,
                        help="node visits the slow loop reference may spend per policy and size")
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--policies", default=",".join(sorted(PLACEMENT_POLICIES)))
    parser.add_argument("--no-solve", action="store_true", help="skip the offline LoTES solve times")
    parser.add_argument("--solve-max-classes", type=int, default=9, help="offline solve: 4 (Table 2) to this many classes")
    args = parse_quick(parser, {"decisions": 200, "loop_budget": 20_000, "sizes": "100", "solve_max_classes": 4})
    print("placements/s: constraint mask + decision + allocation (task completions run between, untimed);")
    print("decisions/s: the policy's choose() alone. ratio: placements/s over the loop's.")
    print(f"{'nodes':>6} {'policy':>10} {'placements/s':>13} {'decisions/s':>12} {'loop/s':>9} {'ratio':>7} "
          f"{'placed':>7}  same")
    for size in (int(s) for s in args.sizes.split(",")):
        rng = random.Random(args.seed)
        nodes = lotes_cluster(size, rng)
        tasks = lotes_tasks(args.decisions, rng)
        loop_tasks = tasks[: max(20, min(len(tasks), args.loop_budget // size))]
        for policy in args.policies.split(","):
            fast, fast_s, policy_s = run_vectorized(policy, nodes, tasks, args.seed)
            fast_rate = len(tasks) / fast_s
            placed = sum(d is not None for d in fast) / len(fast)
            if policy == "lotes":   # no loop reference: it follows a solved plan
                print(f"{size:>6} {policy:>10} {fast_rate:>13,.0f} {len(tasks) / policy_s:>12,.0f} "
                      f"{'-':>9} {'-':>7} {placed:>6.0%}  n/a", flush=True)
                continue
            slow, slow_s = run_loop(policy, nodes, loop_tasks, args.seed)
            slow_rate = len(loop_tasks) / slow_s
            same = fast[: len(slow)] == slow
            print(f"{size:>6} {policy:>10} {fast_rate:>13,.0f} {len(tasks) / policy_s:>12,.0f} "
                  f"{slow_rate:>9,.0f} {fast_rate / slow_rate:>6.0f}x "
                  f"{placed:>6.0%}  {'yes' if same else 'NO'}", flush=True)
            if not same:
                print("decisions differ from the reference", file=sys.stderr)
                return 1
    if not jobs_table(args):
        print("decisions differ from the reference", file=sys.stderr)
        return 1
    if not args.no_solve:
        solve_times(args.seed, args.solve_max_classes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
