"""The master's tick with many tasks waiting to start (issue 11, step 6): --tasks tasks
placed on --nodes nodes and never reported RUNNING (the launches are in flight), then
ticks before the start timeout (nothing due) and after it for --expired of them.
Thread CPU time per tick, the median of --repeat ticks.

    .venv/bin/python bench/tick_starting.py [--tasks 11000] [--nodes 1000] [--expired 100]
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
from tcluster.master.core.actions import Registration  # noqa: E402
from tcluster.master.core.events import AgentJoined, Now, Place, Submit, Tick  # noqa: E402
from tcluster.master.core.state import MasterState, Timeouts  # noqa: E402
from tcluster.master.core.transitions import handle  # noqa: E402
from tcluster.domain.model import JobSpec  # noqa: E402
from tcluster.domain.resources import Resources  # noqa: E402

GiB = 2**30
TIMEOUTS = Timeouts(node_timeout_s=1e9, lost_timeout_s=1e9, start_timeout_s=120, job_retention_s=1e9,
                    purge_interval_s=1e9)


def starting(tasks: int, nodes: int, expired: int) -> MasterState:
    """`expired` tasks placed at mono 1, the rest at mono 100 (each node's clock then)."""
    state = MasterState([], [], [], [], TIMEOUTS, started_mono=0.0)
    names = [f"n{i:05d}" for i in range(nodes)]
    per = -(-tasks // nodes)

    def do(event: object, mono: float) -> None:
        state.apply(handle(state, event, Now(1000.0 + mono, mono)))   # type: ignore[arg-type]
    for name in names:
        do(AgentJoined(Registration(name, Resources(per + 1, (per + 1) * GiB), Resources(), (), "fake", ())), 1.0)
    batches = [(expired, 1.0)] + [(min(10_000, tasks - expired - s), 100.0) for s in range(0, tasks - expired, 10_000)]
    for j, (count, mono) in enumerate(batches):    # at most 10,000 tasks a job
        job_id = f"{j:08x}"
        do(Submit(job_id, JobSpec(("sleep", "inf"), Resources(1, GiB), tasks=count)), mono)
        ids = [t.id for t in state.tasks[job_id]]
        for name in names:     # each node heard from at `mono`: its launches start then
            state.live[name] = type(state.live[name])(True, mono, 1000.0 + mono)
        do(Place(tuple((t, names[i % nodes]) for i, t in enumerate(ids))), mono)
    return state


def per_tick(state: MasterState, mono: float, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.thread_time()
        handle(state, Tick(), Now(1000.0 + mono, mono))
        times.append(time.thread_time() - started)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=11_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--expired", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=21)
    args = parse_quick(parser, {"tasks": 200, "nodes": 20, "expired": 5, "repeat": 3})
    state = starting(args.tasks, args.nodes, args.expired)
    quiet = per_tick(state, 110.0, args.repeat)       # nobody past the 120 s start timeout
    due = per_tick(state, 130.0, args.repeat)         # the `expired` ones are (each tick decides them again)
    print(f"{args.tasks:,} STARTING tasks on {args.nodes:,} nodes; median of {args.repeat} ticks (thread CPU); "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"tick, none due: {quiet * 1e6:,.0f} us; tick, {args.expired} due: {due * 1e6:,.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
