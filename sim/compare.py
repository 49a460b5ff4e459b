"""Policies side by side on a generated workload: Tran et al.'s section 5.4 comparison.
Policies: lotes, tetris, greedy (the paper's Greedy, machine queues) and any master
placement policy over one central queue (`first-fit-central`; sim/queueing.py).

For each seed: one instance of the classes (the generator's draw), LoTES's offline solve
(timed), then for each load one arrival stream shared by every policy. Metrics per run:
the paper's response time (arrival to start) as mean, p50, p99 and the fraction of tasks
that waited at all; the time-averaged queue length; the completion (sojourn) time; tasks
never started by the horizon (censored: an unstable run leaves many)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from tcluster.scheduler.lotes.classes import group_configurations
from tcluster.scheduler.lotes.lp import solve
from tcluster.scheduler.lotes.model import LotesUnsolvable, Plan, Problem
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.sim.queueing import QueueRun, QueueSim, comparison_name, draw_arrivals
from tcluster.sim.scenario import Scenario

DEFAULT_POLICIES = ("lotes", "tetris", "greedy", "first-fit-central")


@dataclass(frozen=True)
class RunSummary:
    policy: str
    load: float | None
    seed: int
    rate: float
    arrivals: int
    mean_response: float
    p50_response: float
    p99_response: float
    waited_fraction: float
    mean_queue: float
    mean_completion: float
    unstarted: int
    unstable: bool
    note: str = ""


@dataclass(frozen=True)
class SolveInfo:
    seed: int
    lambda1: float
    lambda2_lp: float
    lambda2: float
    bins: int
    solve_s: float
    notes: tuple[str, ...]


def compare(scenario: Scenario, policies: Sequence[str], seeds: Sequence[int],
            loads: Sequence[float] | None = None) -> tuple[list[RunSummary], list[SolveInfo], dict[str, QueueRun]]:
    """Every (seed, load, policy) run; the queue timelines of the first seed at the last load."""
    workload = scenario.workload
    assert workload is not None
    policies = list(dict.fromkeys(comparison_name(p) for p in policies))
    kinds = tuple(dict.fromkeys(k for n in scenario.nodes for k in n.capacity.as_dict()))
    nodes = [(n.name, n.capacity, dict(n.labels)) for n in scenario.nodes]
    configs = group_configurations(nodes, kinds, workload.config_label)
    loads = tuple(loads or workload.loads) or (None,)
    runs, solves, timelines = [], [], {}
    for seed in seeds:
        problem = Problem(kinds, configs, workload.instance(configs, _largest(configs), seed), workload.fit_fix)
        plan, info = _solve(problem, seed)
        if info is not None:
            solves.append(info)
        for load in loads:
            rate = workload.rate if load is None else load * (plan.lambda2_lp if plan else 0.0)
            if not rate:
                raise LotesUnsolvable("a load needs LoTES's lambda*, and the LPs found no plan")
            arrivals = draw_arrivals(problem.classes, rate, workload.horizon, workload.work_mean, workload.cv,
                                     _largest(configs), seed)
            for policy in policies:
                run = _simulate(scenario, configs, problem, plan, policy, arrivals, seed, workload.horizon)
                runs.append(_summary(run, load, seed, rate, "" if plan or policy != "lotes" else "no plan: anbf"))
                if seed == seeds[0] and load == loads[-1]:
                    timelines[policy] = run
    return runs, solves, timelines


def _largest(configs) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.max(np.array([c.capacity for c in configs], dtype=float), axis=0)


def _solve(problem: Problem, seed: int) -> tuple[Plan | None, SolveInfo | None]:
    started = time.perf_counter()   # the offline phase is timed here, outside the pure code
    try:
        plan = solve(problem)
    except LotesUnsolvable:
        return None, None
    return plan, SolveInfo(seed, plan.lambda1, plan.lambda2_lp, plan.lambda2, sum(len(b) for b in plan.bins),
                           time.perf_counter() - started, plan.notes)


def _simulate(scenario: Scenario, configs, problem: Problem, plan: Plan | None, policy: str,  # type: ignore[no-untyped-def]
              arrivals, seed: int, horizon: float) -> QueueRun:
    matrix = NodeMatrix()
    for node in scenario.nodes:
        matrix.upsert(node.name, node.capacity, dict(node.labels))
    config_of = {name: j for j, c in enumerate(configs) for name in c.nodes}
    name = "anbf" if policy == "lotes" and plan is None else policy
    return QueueSim(matrix, config_of, problem.speeds(), name, plan, arrivals, seed).run(horizon)


def _summary(run: QueueRun, load: float | None, seed: int, rate: float, note: str) -> RunSummary:
    waits = run.waits
    pct = (lambda q: float(np.percentile(waits, q))) if len(waits) else (lambda q: 0.0)
    return RunSummary(
        run.policy if not note else "lotes", load, seed, rate, run.arrivals,
        float(waits.mean()) if len(waits) else 0.0, pct(50), pct(99),
        float((waits > 1e-12).mean()) if len(waits) else 0.0, _time_average(run.queue, run.end),
        float(run.sojourns.mean()) if len(run.sojourns) else 0.0, run.unstarted, run.unstable, note)


def _time_average(log: list[tuple[float, int]], end: float) -> float:
    if end <= 0:
        return 0.0
    times = np.array([t for t, _ in log] + [end])
    values = np.array([v for _, v in log], dtype=float)
    return float((values * np.diff(times)).sum() / end)


def to_json(runs: list[RunSummary], solves: list[SolveInfo]) -> dict[str, Any]:
    return {"runs": [asdict(r) for r in runs], "solves": [asdict(s) for s in solves]}
