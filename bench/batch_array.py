"""Arrays at scale (issue 22, "Benchmark"), each figure beside its goal.

(a) submit: a live master in this process (tcluster.master.app.server.start_master on
    127.0.0.1 port 0, SQLite in a temporary directory, no agents), a 1,000,000-index
    array submitted through the gRPC Submit: the RPC's time (goal < 1 s) and the
    process's RSS before and after, after gc (goal < 50 MiB more), taken again once the
    master's scheduling loop has seen the job. The same number of tasks as ordinary jobs
    needs 100 jobs of 10,000 (MAX_TASKS_PER_JOB): submitted one after the other into the
    same master, each timed, RSS after (`--ordinary-jobs` sets how many; the row says
    what that is per million tasks).
(b) placing: the master's own core (MasterState + handle: the Place transition that
    makes an array's task rows as its indexes are taken), 1,000 nodes joined, and the
    master's schedule_round with the views the master gives it (state.pending_views()).
    Each round's placements are committed through Place and applied; then the placed
    tasks end (reported SUCCEEDED), so the next round places more. No store, no agents,
    no network. One array of N indexes against N/10,000 ordinary jobs of 10,000 tasks,
    side by side in one run: tasks/s (placed / (round + commit time)) and the ratio
    (goal: the array at least as fast). The two alternate `--repeat` times (ordinary
    first), each after a full gc; the best and the median of each are printed, as the
    machine is shared and one run's time varies by 2x. Times are this process's CPU
    time (time.process_time: the master's core runs in it, nothing waits on I/O), which
    other load on the machine disturbs less than wall time. `--no-gc` turns the cyclic
    garbage collector off while placing: an array makes its task rows as it places (an
    ordinary job made them at submit, untimed), and the collections those new objects
    trigger are part of the array's cost; with and without shows how much.

    .venv/bin/python bench/batch_array.py [--indexes 1000000] [--ordinary-jobs 100]
        [--nodes 1000] [--slots 10] [--place-tasks 50000] [--only submit|place]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from tcluster.master.core.actions import Registration, TaskReport  # noqa: E402
from tcluster.master.core.events import AgentJoined, Now, Place, Reports, Submit  # noqa: E402
from tcluster.master.core.state import MasterState, Timeouts  # noqa: E402
from tcluster.master.core.transitions import handle  # noqa: E402
from tcluster.master.app.server import start_master  # noqa: E402
from tcluster.master.settings import MasterSettings  # noqa: E402
from tcluster.domain.model import MAX_TASKS_PER_JOB, JobSpec, TaskState  # noqa: E402
from tcluster.domain.resources import Resources  # noqa: E402
from tcluster.scheduler.fairness import make_fairness  # noqa: E402
from tcluster.scheduler.matching import EligibleCache  # noqa: E402
from tcluster.scheduler.placement import make_placement  # noqa: E402
from tcluster.scheduler.reservations import Reservations  # noqa: E402
from tcluster.scheduler.round import schedule_round  # noqa: E402
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc  # noqa: E402

MiB = 2**20
SUBMIT_GOAL_S, RSS_GOAL_MIB = 1.0, 50.0


def rss_mib() -> float:
    """This process's resident set, after a full collection."""
    gc.collect()
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MiB


# ---- (a) submit to a live master ----

def spec_message(tasks: int = 1, array: str = "") -> jobs_pb2.JobSpec:
    spec = jobs_pb2.JobSpec(command=["true"], tasks=tasks, array=array)
    spec.resources.cpu, spec.resources.memory = 1, 2**30
    return spec


async def timed_submit(stub: jobs_pb2_grpc.JobServiceStub, spec: jobs_pb2.JobSpec) -> tuple[float, str]:
    started = time.perf_counter()
    job = await stub.Submit(jobs_pb2.SubmitRequest(spec=spec))
    return time.perf_counter() - started, job.id


async def submit_phase(indexes: int, ordinary_jobs: int, settle_s: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        master = await start_master(MasterSettings(listen="127.0.0.1:0", data_dir=Path(tmp) / "master",
                                                   schedule_interval_s=0.2))
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{master.port}")
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        try:
            await timed_submit(stub, spec_message())     # the first RPC's set-up is no array's cost
            await asyncio.sleep(settle_s)
            before = rss_mib()
            seconds, job_id = await timed_submit(stub, spec_message(array=f"0-{indexes - 1}"))
            after = rss_mib()
            await asyncio.sleep(settle_s)                # rounds have seen it: pending views, reasons
            settled = rss_mib()
            got = await stub.Get(jobs_pb2.GetJobRequest(id=job_id))
            print(f"(a) array 0-{indexes - 1}: Submit {seconds * 1000:.1f} ms (goal < {SUBMIT_GOAL_S:g} s), "
                  f"RSS {before:.1f} -> {after:.1f} MiB (+{after - before:.1f}), after {settle_s:g} s of rounds "
                  f"{settled:.1f} MiB (+{settled - before:.1f}; goal < {RSS_GOAL_MIB:g} MiB); "
                  f"the master says {got.spec.tasks} tasks, unplaced {got.unplaced or '-'}")
            await ordinary_submits(stub, ordinary_jobs, settle_s)
        finally:
            await channel.close()
            await master.stop(grace_s=0)


async def ordinary_submits(stub: jobs_pb2_grpc.JobServiceStub, jobs: int, settle_s: float) -> None:
    """The same tasks as plain jobs of MAX_TASKS_PER_JOB: every task a row in memory and the store."""
    if jobs <= 0:
        return
    before = rss_mib()
    times = []
    for _ in range(jobs):
        seconds, _ = await timed_submit(stub, spec_message(tasks=MAX_TASKS_PER_JOB))
        times.append(seconds)
    await asyncio.sleep(settle_s)
    grown = rss_mib() - before
    tasks = jobs * MAX_TASKS_PER_JOB
    per_million = 1_000_000 / tasks
    print(f"(a) {jobs} ordinary jobs x {MAX_TASKS_PER_JOB:,} tasks ({tasks:,} tasks): Submit total {sum(times):.2f} s "
          f"(each {min(times) * 1000:.0f}-{max(times) * 1000:.0f} ms), RSS +{grown:.1f} MiB"
          + (f"; per million tasks: {sum(times) * per_million:.1f} s, +{grown * per_million:.0f} MiB"
             if tasks != 1_000_000 else ""))


# ---- (b) placing through the master's core ----

TIMEOUTS = Timeouts(node_timeout_s=1e9, lost_timeout_s=1e9, start_timeout_s=1e9, job_retention_s=1e9,
                    heartbeat_interval_s=1)


@dataclass
class PlaceResult:
    label: str
    tasks: int
    rounds: int
    round_s: float
    commit_s: float

    @property
    def rate(self) -> float:
        return self.tasks / (self.round_s + self.commit_s)


class Core:
    """A MasterState driven by events, as the service drives it (without the store)."""

    def __init__(self, nodes: int, slots: int) -> None:
        self.state = MasterState([], [], [], [], TIMEOUTS, started_mono=0.0)
        self.clock = 0.0
        for i in range(nodes):
            reg = Registration(f"n{i:05d}", Resources(slots, slots * 2**30), Resources(), (), "fake", (), (), 0)
            self.do(AgentJoined(reg))

    def do(self, event: object) -> None:
        self.clock += 0.001
        self.state.apply(handle(self.state, event, Now(1000.0 + self.clock, self.clock)))  # type: ignore[arg-type]


def place_all(label: str, specs: list[JobSpec], nodes: int, slots: int, seed: int) -> PlaceResult:
    core = Core(nodes, slots)
    for i, spec in enumerate(specs):
        core.do(Submit(f"job{i:04d}", spec))
    fairness, placement, rng, cache = make_fairness("mch"), make_placement("anbf"), random.Random(seed), EligibleCache()
    total = sum(len(core.state.tasks[j]) + len(core.state.jobs[j].unplaced) for j in core.state.jobs)
    book, placed, rounds, round_s, commit_s = Reservations(), 0, 0, 0.0, 0.0
    while placed < total:
        state = core.state
        pending = {job_id: state.tasks[job_id] for job_id in sorted(state.pending_jobs)}
        started = time.process_time()
        result = schedule_round(state.jobs, pending, state.matrix, fairness, placement, rng, cache,
                                reservations=book, now=core.clock, views=state.pending_views())
        middle = time.process_time()
        core.do(Place(tuple((t.id, node) for t, node in result.placements)))
        commit_s += time.process_time() - middle
        round_s += middle - started
        book, rounds, placed = result.holds or book, rounds + 1, placed + len(result.placements)
        if not result.placements:
            raise RuntimeError(f"{label}: a round placed nothing with {total - placed} tasks left")
        finish(core, result.placements)   # untimed: the agents' side
    return PlaceResult(label, placed, rounds, round_s, commit_s)


def finish(core: Core, placements: list) -> None:
    """The placed tasks run and succeed: their room is free for the next round."""
    by_node: dict[str, list[TaskReport]] = {}
    for task, node in placements:
        by_node.setdefault(node, []).append(TaskReport(task.id, 1, TaskState.RUNNING, at=core.clock))
        by_node[node].append(TaskReport(task.id, 1, TaskState.SUCCEEDED, exit_code=0, at=core.clock))
    for node, reports in by_node.items():
        core.do(Reports(node, tuple(reports), len(reports)))


def place_phase(tasks: int, nodes: int, slots: int, seed: int, repeat: int, collect: bool) -> None:
    resources = Resources(1, 2**30)
    jobs = -(-tasks // MAX_TASKS_PER_JOB)
    sides = {
        f"{jobs} ordinary job(s)": [JobSpec(("true",), resources, tasks=min(MAX_TASKS_PER_JOB, tasks - i * MAX_TASKS_PER_JOB))
                                    for i in range(jobs)],
        f"array 0-{tasks - 1}": [JobSpec(("true",), resources, array=f"0-{tasks - 1}")],
    }
    runs: dict[str, list[PlaceResult]] = {label: [] for label in sides}
    for _ in range(repeat):
        for label, specs in sides.items():
            gc.collect()
            if not collect:
                gc.disable()
            runs[label].append(place_all(label, specs, nodes, slots, seed))
            gc.enable()
    print(f"(b) placing {tasks:,} tasks on {nodes:,} nodes x {slots} slots (mch + anbf), {repeat} runs each, "
          f"gc {'on' if collect else 'off'}, CPU seconds; round = schedule_round, commit = the Place transition:")
    best = {}
    for label, results in runs.items():
        results.sort(key=lambda r: r.rate, reverse=True)
        top, median = results[0], results[len(results) // 2]
        best[label] = (top.rate, median.rate)
        print(f"    {label:<22} rounds {top.rounds:>3}  best: round {top.round_s:5.2f} s  commit {top.commit_s:5.2f} s  "
              f"{top.rate:>7,.0f} tasks/s   median {median.rate:>7,.0f} tasks/s   "
              f"(all: {', '.join(f'{r.rate:,.0f}' for r in results)})")
    (ordinary, array) = best.values()
    print(f"    array / ordinary: best {array[0] / ordinary[0]:.2f}x, median {array[1] / ordinary[1]:.2f}x "
          "(goal: the same tasks/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--indexes", type=int, default=1_000_000)
    parser.add_argument("--ordinary-jobs", type=int, default=100)
    parser.add_argument("--settle-s", type=float, default=1.0)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=10, help="tasks per node at once (1 CPU each)")
    parser.add_argument("--place-tasks", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-gc", action="store_true", help="(b): no cyclic gc while placing")
    parser.add_argument("--only", choices=("submit", "place"))
    args = parse_quick(parser, {"indexes": 2000, "ordinary_jobs": 1, "settle_s": 0.2, "nodes": 20, "slots": 2,
                                        "place_tasks": 400, "repeat": 1})
    if args.only != "place":
        asyncio.run(submit_phase(args.indexes, args.ordinary_jobs, args.settle_s))
    if args.only != "submit":
        place_phase(args.place_tasks, args.nodes, args.slots, args.seed, args.repeat, not args.no_gc)


if __name__ == "__main__":
    main()
