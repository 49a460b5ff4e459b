"""A scheduling round with the user level and decayed usage (issue 33) against today's round
(`share: jobs`, no decay), side by side in one run: --nodes nodes holding --running tasks
of --users users, and --pending-jobs jobs waiting (one task each of a few sizes, spread
over the users and --leaves leaf queues), a cluster with room for about --room tasks.

Each variant has its own fairness policy (MCH keeps state between rounds) and runs the
master's own `schedule_round` on the same node matrix (placements are tentative and
undone, so every round sees the same state). The new round also gets the usage-weighted
tree (master/usagedecay.py's cache: rebuilt only when an accrual changes the weights)
and the per-(leaf, user) holdings. Medians of --repeat rounds, alternating; the accrual
itself (once per interval, not per round) is timed apart. Target: ratio <= 1.5.

    .venv/bin/python bench/fair_users.py [--nodes 10000] [--running 50000] [--users 1000]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from tcluster.domain.model import Job, JobSpec, Task  # noqa: E402
from tcluster.domain.resources import Resources  # noqa: E402
from tcluster.master.usagedecay import UsageDecay  # noqa: E402
from tcluster.scheduler.decay import DecayLedger, accrue, ledger_keys  # noqa: E402
from tcluster.scheduler.fairness import make_fairness  # noqa: E402
from tcluster.scheduler.matching import EligibleCache  # noqa: E402
from tcluster.scheduler.nodestate import NodeMatrix  # noqa: E402
from tcluster.scheduler.placement import make_placement  # noqa: E402
from tcluster.scheduler.queues import QueueTree, parse_queue_text  # noqa: E402
from tcluster.scheduler.round import schedule_round  # noqa: E402
from tcluster.scheduler.usershare import held_of  # noqa: E402
from tcluster.scheduler.views import JobView  # noqa: E402

GiB = 2**30
SIZES = (Resources(1, 2 * GiB), Resources(2, 4 * GiB), Resources(0.5, GiB))


def tree(leaves: int, share: str) -> QueueTree:
    body = "".join(f"  d{i}: {{weight: {1 + i % 3}, share: {share}}}\n" for i in range(leaves))
    return parse_queue_text("queues:\n" + body, "bench")


def cluster(nodes: int, running: int, room: int, users: int, leaves: int, rng: random.Random
            ) -> tuple[NodeMatrix, dict[tuple[str, str], Resources]]:
    """Nodes of 16 cores, 64 GiB; `running` tasks of 1 core spread over them, owned round
    robin; the cores left over are about `room` tasks' worth."""
    per_node = max(-(-(running + room) // nodes), 1)
    matrix = NodeMatrix()
    for i in range(nodes):
        matrix.upsert(f"n{i:05d}", Resources(per_node, per_node * 4 * GiB), {}, schedulable=True)
    task = Resources(1, 2 * GiB)
    for t in range(running):
        matrix.allocate(f"n{t % nodes:05d}", task)
    rows = [(f"d{t % leaves}", f"u{t % users:04d}", task, 1) for t in range(running)]
    return matrix, held_of(rows)


def waiting(count: int, users: int, leaves: int, rng: random.Random
            ) -> tuple[dict[str, Job], dict[str, list[Task]], list[JobView]]:
    jobs, tasks, views = {}, {}, []
    for j in range(count):
        job_id, user, leaf = f"{j:08x}", f"u{rng.randrange(users):04d}", f"d{rng.randrange(leaves)}"
        spec = JobSpec(("sleep",), SIZES[j % len(SIZES)], queue=leaf, owner=user)
        jobs[job_id] = Job(job_id, spec, submitted_at=float(j))
        tasks[job_id] = [Task(job_id, 0)]
        views.append(JobView(job_id, leaf, float(j), spec.resources, 1, 0, 1.0, user))
    return jobs, tasks, views


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=50_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--leaves", type=int, default=20)
    parser.add_argument("--pending-jobs", type=int, default=5_000)
    parser.add_argument("--room", type=int, default=2_000)
    parser.add_argument("--fairness", default="mch")
    parser.add_argument("--placement", default="anbf")
    parser.add_argument("--repeat", type=int, default=7)
    args = parse_quick(parser, {"nodes": 50, "running": 200, "users": 10, "leaves": 3, "pending_jobs": 40,
                                "room": 20, "repeat": 2})
    rng = random.Random(0)
    matrix, held = cluster(args.nodes, args.running, args.room, args.users, args.leaves, rng)
    jobs, tasks, views = waiting(args.pending_jobs, args.users, args.leaves, rng)
    today, users_tree = tree(args.leaves, "jobs"), tree(args.leaves, "users")
    capacity = matrix.total_capacity()
    decay = UsageDecay(7 * 86400.0)
    started = time.perf_counter()
    keys = ledger_keys(users_tree, held)
    ledger = accrue(accrue(DecayLedger(), 0.0, {}, capacity, decay.half_life_s), 3600.0, keys, capacity,
                    decay.half_life_s)
    accrual_s = time.perf_counter() - started
    policies = {"today": make_fairness(args.fairness), "users+decay": make_fairness(args.fairness)}
    placement, cache = make_placement(args.placement), EligibleCache()

    def one(name: str) -> tuple[float, int]:
        began = time.perf_counter()
        if name == "today":
            result = schedule_round(jobs, tasks, matrix, policies[name], placement, random.Random(1), cache,
                                    queues=today, views=views, held=held)
        else:
            fair = decay.fair_tree(users_tree, ledger)
            result = schedule_round(jobs, tasks, matrix, policies[name], placement, random.Random(1), cache,
                                    queues=fair, views=views, held=held)
        return time.perf_counter() - began, len(result.placements)

    times: dict[str, list[float]] = {"today": [], "users+decay": []}
    placed: dict[str, int] = {}
    for name in times:     # warm: the first round builds each policy's state
        one(name)
    for _ in range(args.repeat):
        for name in times:
            spent, placed[name] = one(name)
            times[name].append(spent)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{args.nodes:,} nodes, {args.running:,} running tasks of {args.users:,} users in {args.leaves} leaves, "
          f"{args.pending_jobs:,} waiting jobs; {args.fairness} + {args.placement}; median of {args.repeat} rounds; "
          f"load average {os.getloadavg()[0]:.2f}")
    for name, value in medians.items():
        print(f"  {name:12s} round {value * 1e3:8.1f} ms, {placed[name]:,} placed")
    print(f"  accrual (once per interval, not per round): {accrual_s * 1e3:.1f} ms over {len(keys):,} keys")
    print(f"ratio users+decay / today: {medians['users+decay'] / medians['today']:.2f} (target <= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
