"""The SQLite store's group commits of a task burst, alone: the steps the master writes for
N jobs of T tasks (the submit, the placement of every task, RUNNING reports of R tasks per
agent), committed in batches of B steps as the committer hands them over, on a worker
thread, with a Python thread busy meanwhile as the event loop is in a burst (--busy 0: an
idle loop). Prints wall and CPU per phase; compare revisions with bench/at_revision.py:

    .venv/bin/python bench/at_revision.py --rev main -- bench/store_commit.py --jobs 20
    .venv/bin/python bench/store_commit.py --jobs 300 --tasks 10 --per-report 10 --batch 2 --switch-ms 1
                                        # churn-sized commits: ms a commit beside the busy loop
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from tcluster.master.core.events import Step
from tcluster.master.store.sqlite import Store
from tcluster.domain.model import Job, JobSpec, JobState, Task, TaskState
from tcluster.domain.resources import Resources


def phases(jobs: int, tasks: int, per_report: int) -> list[tuple[str, list[tuple[Step, list[str]]]]]:
    ids = [f"burst{j:04d}" for j in range(jobs)]
    spec = JobSpec(("sleep", "inf"), Resources(1), tasks=tasks)
    submit = [(Step(jobs={i: Job(i, spec, 1.0)}, tasks={f"{i}.{n}": Task(i, n) for n in range(tasks)}), [i])
              for i in ids]
    place = [(Step(jobs={i: Job(i, spec, 1.0, JobState.RUNNING)},
                   tasks={f"{i}.{n}": Task(i, n, TaskState.STARTING, f"node{n % 1000:04d}", 1)
                          for n in range(tasks)}), [])
             for i in ids]
    running = [(Step(jobs={i: Job(i, spec, 1.0, JobState.RUNNING)},
                     tasks={f"{i}.{n}": Task(i, n, TaskState.RUNNING, f"node{n % 1000:04d}", 1, started_at=2.5)
                            for n in range(first, min(first + per_report, tasks))}), [])
               for i in ids for first in range(0, tasks, per_report)]
    return [("submit", submit), ("place", place), ("running", running)]


def busy(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        for n in range(1000):
            x += n


def commit_all(store: Store, steps: list[tuple[Step, list[str]]], batch: int) -> tuple[float, float, int]:
    """(wall s, this thread's CPU s, commits), the batches written on a thread of their own."""
    out: list[float] = []

    def writer() -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        for at in range(0, len(steps), batch):
            store.apply_many(steps[at:at + batch])
        out.extend([time.perf_counter() - wall, time.thread_time() - cpu])
    thread = threading.Thread(target=writer)
    thread.start()
    thread.join()
    return out[0], out[1], -(-len(steps) // batch)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=20)
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--per-report", type=int, default=50)
    p.add_argument("--batch", type=int, default=60, help="steps per group commit")
    p.add_argument("--busy", type=int, default=1, help="busy Python threads beside the writer")
    p.add_argument("--switch-ms", type=float, default=0.0,
                   help="sys.setswitchinterval in ms (0: Python's 5 ms; tcl-master sets its own, master/app/main.py)")
    a = parse_quick(p, {"jobs": 2, "tasks": 100, "per_report": 10, "batch": 10})
    if a.switch_ms > 0:
        sys.setswitchinterval(a.switch_ms / 1000)
    stop = threading.Event()
    for _ in range(a.busy):
        threading.Thread(target=busy, args=(stop,), daemon=True).start()
    print(f"store_commit: {a.jobs} jobs x {a.tasks} tasks, reports of {a.per_report}, {a.batch} steps a commit, "
          f"{a.busy} busy thread(s), switch interval {sys.getswitchinterval() * 1000:g} ms")
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "master.db")
        total = 0.0
        for name, steps in phases(a.jobs, a.tasks, a.per_report):
            wall, cpu, commits = commit_all(store, steps, a.batch)
            total += wall
            rows = sum(len(s.tasks) for s, _ in steps)
            print(f"  {name:<8} {rows:>7,} task rows {commits:>4} commits  wall {wall:6.2f} s  writer CPU {cpu:5.2f} s"
                  f"  {rows / wall:>9,.0f} rows/s  {1000 * wall / commits:7.1f} ms a commit")
        print(f"  all phases: wall {total:.2f} s")
        store.close()
    stop.set()


if __name__ == "__main__":
    main()
