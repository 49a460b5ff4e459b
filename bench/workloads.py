"""Generated clusters and workloads shaped like the LoTES paper's Google trace data
(../shared/seeds/001-lotes-multistage-scheduling.txt, Tables 1 and 2)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tcluster.domain.resources import Resources

GiB = 2**30
# The largest machine; Table 1's capacities are normalized to it.
MAX_CORES, MAX_MEMORY = 64.0, 256 * GiB
# Table 1: (number of machines, cores, memory), normalized.
LOTES_MACHINES = [
    (6732, 0.50, 0.50), (3863, 0.50, 0.25), (1001, 0.50, 0.75), (795, 1.00, 1.00), (126, 0.25, 0.25),
    (52, 0.50, 0.12), (5, 0.50, 0.03), (5, 0.50, 0.97), (3, 1.00, 0.50), (1, 1.00, 0.06),
]
# Table 2: (cores, memory, proportion of jobs), normalized.
LOTES_JOB_CLASSES = [(0.02, 0.01, 0.23), (0.02, 0.03, 0.46), (0.07, 0.03, 0.30), (0.20, 0.06, 0.01)]


@dataclass(frozen=True)
class BenchNode:
    name: str
    capacity: Resources
    labels: dict[str, str]


@dataclass(frozen=True)
class BenchTask:
    request: Resources
    constraints: tuple[str, ...]


def lotes_cluster(n: int, rng: random.Random) -> list[BenchNode]:
    """n machines in Table 1's proportions, with rack/arch/gpu labels."""
    weights = [count for count, _, _ in LOTES_MACHINES]
    nodes = []
    for i in range(n):
        _, cores, memory = rng.choices(LOTES_MACHINES, weights)[0]
        labels = {"rack": f"r{i % 40}", "arch": "arm64" if rng.random() < 0.1 else "x86_64"}
        if rng.random() < 0.05:
            labels["gpu"] = "a100"
        nodes.append(BenchNode(f"node-{i:05d}", Resources(cores * MAX_CORES, int(memory * MAX_MEMORY)), labels))
    return nodes


def lotes_tasks(count: int, rng: random.Random, constrained: float = 0.2) -> list[BenchTask]:
    """Table 2's classes with a truncated Gaussian spread (coefficient of variation 0.5,
    as the paper's generated workloads); a fraction carries constraints."""
    weights = [share for _, _, share in LOTES_JOB_CLASSES]
    tasks = []
    for _ in range(count):
        cores, memory, _ = rng.choices(LOTES_JOB_CLASSES, weights)[0]
        cpu = min(1.0, max(0.005, rng.gauss(cores, cores / 2))) * MAX_CORES
        mem = min(1.0, max(0.001, rng.gauss(memory, memory / 2))) * MAX_MEMORY
        tasks.append(BenchTask(Resources(round(cpu, 3), int(mem)), _constraints(rng) if rng.random() < constrained else ()))
    return tasks


def trace_job_sizes(count: int, rng: random.Random) -> list[int]:
    """Tasks per job, heavy-tailed as in the Google trace: most jobs have 1-3 tasks, a
    few have up to 200 (the same draw as bench/fairness.py)."""
    return [min(200, int(rng.paretovariate(1.2))) for _ in range(count)]


def _constraints(rng: random.Random) -> tuple[str, ...]:
    return rng.choice([
        (f"rack in (r{rng.randrange(40)},r{rng.randrange(40)},r{rng.randrange(40)})",),
        ("arch=arm64",),
        ("has gpu",),
        ("arch!=arm64", f"rack!=r{rng.randrange(40)}"),
    ])
