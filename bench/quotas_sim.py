"""A `tcl sim` scenario with and without its queue quotas (README, "Quotas and borrowing"):
per queue, the wait from a job's submit to each task's start (p50 / p99), the most CPU it
held at once, and for the run the utilization and tasks done.

    .venv/bin/python bench/quotas_sim.py examples/quotas-departments.yaml --until 10800

"Without" is the same scenario with every queue's quotas removed (the tree, jobs and
seed unchanged)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.quick import parse_args  # noqa: E402
from tcluster.scheduler.queues import QueueNode, QueueTree  # noqa: E402
from tcluster.scheduler.quotas import QueueCaps  # noqa: E402
from tcluster.sim.engine import SimRun, simulate  # noqa: E402
from tcluster.sim.scenario import Scenario, parse_scenario  # noqa: E402


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "quotas-departments.yaml"


def without_quotas(scenario: Scenario) -> Scenario:
    def strip(node: QueueNode) -> QueueNode:
        return dataclasses.replace(node, caps=QueueCaps(), children=tuple(strip(c) for c in node.children))
    return dataclasses.replace(scenario, queues=QueueTree(strip(scenario.queues.root), scenario.queues.source))


def rows(run: SimRun, until: float) -> tuple[dict[str, tuple[float, float, float, int]], float, int]:
    waits: dict[str, list[float]] = {}
    events: dict[str, list[tuple[float, float]]] = {}
    busy = 0.0
    for track in run.tracks:
        queue, cpu = track.spec.queue, track.spec.resources.cpu
        for r in track.runs:
            waits.setdefault(queue, []).append(r.start - track.spec.submit)
            end = until if r.end is None else min(r.end, until)
            busy += cpu * max(end - r.start, 0.0)
            events.setdefault(queue, []).extend([(r.start, cpu), (end, -cpu)])
    out = {}
    for queue, w in sorted(waits.items()):
        level, peak = 0.0, 0.0
        for _, delta in sorted(events[queue], key=lambda e: (e[0], e[1])):
            level += delta
            peak = max(peak, level)
        out[queue] = (float(np.percentile(w, 50)), float(np.percentile(w, 99)), peak, len(w))
    capacity = float(run.capacity.cpu) * until
    done = sum(sum(1 for r in t.runs if r.end is not None and r.end <= until and not r.preempted) for t in run.tracks)
    return out, busy / capacity, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default=str(EXAMPLE))
    parser.add_argument("--until", type=float, default=10800)
    parser.add_argument("--fairness", default="mch")
    args = parse_args(parser, {"until": 600.0})
    scenario = parse_scenario(Path(args.scenario).read_text(), args.scenario)
    print(f"{args.scenario}  until={args.until:g}s  fairness={args.fairness}  placement=anbf\n")
    print(f"{'SYSTEM':<10} {'QUEUE':<10} {'WAIT P50':>9} {'WAIT P99':>9} {'PEAK CPU':>9} {'STARTS':>7}")
    totals = []
    for name, s in (("quotas", scenario), ("none", without_quotas(scenario))):
        run = simulate(s, args.fairness, "anbf", until=args.until)
        per_queue, utilization, done = rows(run, args.until)
        for queue, (p50, p99, peak, starts) in per_queue.items():
            print(f"{name:<10} {queue:<10} {p50:>8.0f}s {p99:>8.0f}s {peak:>9g} {starts:>7}")
        totals.append((name, utilization, done))
    print()
    for name, utilization, done in totals:
        print(f"{name:<10} utilization {utilization:.3f}  tasks done {done}")


if __name__ == "__main__":
    main()
