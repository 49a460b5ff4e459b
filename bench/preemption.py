"""The preemption decision at scale (issue 21: <= 10 ms per round at 10,000 nodes and
50,000 running tasks). A MasterState as a restart loads it (--nodes nodes, --tasks
RUNNING tasks spread evenly, queues a-d each holding a quarter), then per round what
the live master does after its scheduling round: master/features/preempting.py builds the
planner's input from the state and calls plan_preemption. Nothing is carried out, so
every round decides the same thing again. Cases:

  idle     pending work in queue a, which holds its target: no queue is starved (the common case)
  easy     queue e (weight 1, target 0.2) waits with 2,000 tasks, starved for an hour; every
           running task is old: victims on the first node visited, --max-per-round of them
  two      queues e and f both starved, victims easy
  exempt   as easy, but every running task is younger than --preempt-min-runtime-s: no
           victim anywhere; each starved job visits max_node_visits nodes and gives up
  exempt2  the worst case with two starved queues

Thread CPU time per round (the machine may be shared), p50 and p99 over --rounds rounds, with the share
of it spent building the input (the rest is plan_preemption).

    .venv/bin/python bench/preemption.py [--nodes 10000] [--tasks 50000] [--rounds 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from tcluster.master.core.state import MasterState, Timeouts  # noqa: E402
from tcluster.master.features.preempting import LivePreemption  # noqa: E402
from tcluster.domain.model import Job, JobSpec, Node, Task, TaskState  # noqa: E402
from tcluster.domain.resources import Resources  # noqa: E402
from tcluster.scheduler.matching import EligibleCache  # noqa: E402
from tcluster.scheduler.preemption import PreemptionSettings, plan_preemption  # noqa: E402
from tcluster.scheduler.queues import QueueTree, parse_queue_text  # noqa: E402
from tcluster.scheduler.reservations import Reservations  # noqa: E402

GiB = 2**30
NOW = 100_000.0
TIMEOUTS = Timeouts(node_timeout_s=1e9, lost_timeout_s=1e9, start_timeout_s=1e9, job_retention_s=1e9,
                    purge_interval_s=1e9)
QUEUES = "queues:\n" + "".join(f"  {q}: {{weight: 1}}\n" for q in "abcdef")
TASK = Resources(1, GiB)


def state_for(nodes: int, tasks: int, started_at: float, waiting: dict[str, int]) -> MasterState:
    """`tasks` RUNNING in queues a-d (jobs of at most 10,000), then `waiting`: queue -> pending tasks."""
    names = [f"n{i:05d}" for i in range(nodes)]
    per_node = -(-tasks // nodes)
    node_list = [Node(n, Resources(per_node, per_node * GiB)) for n in names]
    jobs, task_list = [], []
    per_queue = tasks // 4
    for q, queue in enumerate("abcd"):
        for j, first in enumerate(range(0, per_queue, 10_000)):
            job_id = f"r{queue}{j}"
            count = min(10_000, per_queue - first)
            jobs.append(Job(job_id, JobSpec(("sleep", "inf"), TASK, queue=queue, tasks=count), 0.0,))
            for i in range(count):
                k = q * per_queue + first + i
                task_list.append(Task(job_id, i, TaskState.RUNNING, names[k % nodes], 1, started_at=started_at))
    for queue, count in waiting.items():
        job_id = f"w{queue}"
        jobs.append(Job(job_id, JobSpec(("sleep", "inf"), TASK, queue=queue, tasks=count), NOW - 3600))
        task_list += [Task(job_id, i) for i in range(count)]
    state = MasterState(jobs, task_list, node_list, [], TIMEOUTS, started_mono=0.0)
    for node in node_list:      # as if every agent had registered again
        state.matrix.set_schedulable(node.name, True)
    return state


def rounds(state: MasterState, tree: QueueTree, settings: PreemptionSettings, starved: list[str],
           n: int) -> tuple[list[float], list[float], int]:
    """Per round: total seconds, seconds building the input; and the victims of a round."""
    live = LivePreemption(settings, seed=1)
    book, cache = Reservations(), EligibleCache()
    totals, inputs, victims = [], [], 0
    for _ in range(n):
        live.starved_since = {q: NOW - 3600 for q in starved}    # their delay is long over
        started = time.thread_time()
        inp = live._input(state, tree, book, cache, NOW)
        built = time.thread_time()
        plan = plan_preemption(inp, settings, live.starved_since, NOW, live.rng)
        done = time.thread_time()
        totals.append(done - started)
        inputs.append(built - started)
        victims = len(plan.victims)
    return totals, inputs, victims


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--max-per-round", type=int, default=10)
    args = parse_quick(parser, {"nodes": 200, "tasks": 1000, "rounds": 2})
    tree = parse_queue_text(QUEUES, "bench")
    settings = PreemptionSettings(max_per_round=args.max_per_round)
    old, young = NOW - 3600, NOW - 10
    cases = [("idle", old, {"a": 1000}, []), ("easy", old, {"e": 2000}, ["e"]),
             ("two", old, {"e": 2000, "f": 2000}, ["e", "f"]), ("exempt", young, {"e": 2000}, ["e"]),
             ("exempt2", young, {"e": 2000, "f": 2000}, ["e", "f"])]
    print(f"{args.nodes:,} nodes, {args.tasks:,} running tasks in queues a-d, max {args.max_per_round} victims a "
          f"round; {args.rounds} rounds each; load average {os.getloadavg()[0]:.2f}")
    print(f"{'case':<8} {'victims':>7} {'p50 ms':>8} {'p99 ms':>8} {'input p50 ms':>13} {'plan p50 ms':>12}")
    for name, started_at, waiting, starved in cases:
        setup = time.thread_time()
        state = state_for(args.nodes, args.tasks, started_at, waiting)
        setup = time.thread_time() - setup
        totals, inputs, victims = rounds(state, tree, settings, starved, args.rounds)
        plans = [t - i for t, i in zip(totals, inputs)]
        print(f"{name:<8} {victims:>7} {pct(totals, 50) * 1e3:>8.2f} {pct(totals, 99) * 1e3:>8.2f} "
              f"{statistics.median(inputs) * 1e3:>13.2f} {statistics.median(plans) * 1e3:>12.2f}"
              f"   (state built in {setup:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
