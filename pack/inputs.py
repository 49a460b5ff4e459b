"""Inputs of a packing study: a `tcl sim` scenario (nodes and jobs; durations and submit
times are ignored: packing is a single moment in time), or the live cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from tcluster.pack.schedule import PackJob
from tcluster.scheduler.views import NodeSpec
from tcluster.domain.resources import Resources
from tcluster.sim.scenario import load_scenario


def from_scenario(path: Path | str) -> tuple[list[NodeSpec], list[PackJob]]:
    scenario = load_scenario(path)   # errors name the line and the field
    machines = list(scenario.nodes)
    jobs = [PackJob(j.name, j.tasks, j.resources, j.constraints) for j in scenario.jobs]
    return machines, jobs


def from_snapshot(nodes: Iterable[tuple[str, Resources, dict[str, str]]],
                  jobs: Iterable[tuple[str, int, Resources, tuple[str, ...]]]) -> tuple[list[NodeSpec], list[PackJob]]:
    """Plain values taken from the master's ListNodes and List replies."""
    machines = [NodeSpec(name, capacity, tuple(sorted(labels.items()))) for name, capacity, labels in nodes]
    work = [PackJob(name, tasks, request, constraints) for name, tasks, request, constraints in jobs if tasks > 0]
    return sorted(machines, key=lambda m: m.name), work
