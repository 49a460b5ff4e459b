"""The live master's side of preemption (`tcl-master --preemption`): builds the planner's
input from the master's state after each round, turns its victims into one Preempt event
(kill intents, persisted before any signal is sent), holds the claimed nodes in the
round's reservations, and keeps the starvation clocks and the counters /metrics shows.

The decision itself is scheduler/preemption.py, the same code `tcl sim` runs."""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from tcluster.domain.constraints import parse_constraints
from tcluster.master.core.pinning import pinned_node
from tcluster.master.core.events import KillMode, Preempt
from tcluster.master.core.state import MasterState
from tcluster.domain.model import Job, TaskState, node_requirements
from tcluster.domain.resources import Resources
from tcluster.master.features.quotas_live import running_holdings
from tcluster.scheduler.capbook import has_caps, make_capbook
from tcluster.scheduler.matching import EligibleCache
from tcluster.scheduler.quotas import job_user
from tcluster.scheduler.nodestate import resource_vector
from tcluster.scheduler.preemption import (
    Claim, PreemptionInput, PreemptionPlan, PreemptionSettings, WaitingJob, plan_preemption,
)
from tcluster.scheduler.queues import QueueTree
from tcluster.scheduler.reservations import Reservations
from tcluster.scheduler.round import eligible_rows
from tcluster.scheduler.victims import Placed, RunningTask
from tcluster.scheduler.windows import Windows

log = logging.getLogger(__name__)


@dataclass
class PreemptionCounters:
    """For /metrics: counters since the master started."""
    preemptions: Counter[tuple[str, str]] = field(default_factory=Counter)   # (preemptor queue, victim queue)
    cpu_seconds: float = 0.0                                                 # work lost, measured
    blocked: Counter[str] = field(default_factory=Counter)                   # reason -> rounds x jobs


class LivePreemption:
    def __init__(self, settings: PreemptionSettings, seed: int = 0) -> None:
        self.settings = settings
        self.rng = random.Random(seed)
        self.starved_since: dict[str, float] = {}
        self.counters = PreemptionCounters()

    def restore(self, state: MasterState, book: Reservations, now: float) -> None:
        """After a start or a reload: the preemptions in flight (kill intents, on disk) hold
        their nodes for their preemptors again, so the same need is not met twice."""
        claimed = {(k.by_job, k.node) for k in state.kills.values() if k.mode is KillMode.REQUEUE and k.by_job}
        for job_id, node in sorted(claimed):
            if job_id in state.pending_jobs:
                book.claim(job_id, node, now)

    def plan(self, state: MasterState, tree: QueueTree, book: Reservations, cache: EligibleCache,
             now: float, windows: Windows | None = None) -> PreemptionPlan:
        """windows: maintenance windows ahead; no room is made where the job could not start."""
        inp = self._input(state, tree, book, cache, now, windows)
        plan = plan_preemption(inp, self.settings, self.starved_since, now, self.rng)
        self.starved_since = plan.starved_since
        for reason in plan.blocked.values():
            self.counters.blocked[reason.value] += 1
        return plan

    def event(self, plan: PreemptionPlan, state: MasterState, now: float) -> Preempt | None:
        """The plan's victims as one event; counts them (and the CPU time they used)."""
        victims = []
        for v in plan.victims:
            task = state.task(v.task_id)
            if task is None or not task.state.holds_resources:
                continue
            victims.append((v.task_id, task.attempt, v.reason, v.by_job))
            self.counters.preemptions[(v.by_queue, v.queue)] += 1
            self.counters.cpu_seconds += _cpu_seconds(state, v.task_id, task.started_at, now)
        return Preempt(tuple(victims)) if victims else None

    def after_round(self, state: MasterState, tree: QueueTree, book: Reservations, cache: EligibleCache, now: float,
                    do: Callable[[Preempt], object], reasons: dict[str, str], windows: Any = None) -> dict[str, str]:
        """Plans, stops the victims (one Preempt event through `do`), holds the claimed
        nodes; the pending reasons gain what preemption does (or cannot do) for each job."""
        plan = self.plan(state, tree, book, cache, now, windows)
        event = self.event(plan, state, now)
        if event is not None:
            log.info("preempting %s", "; ".join(f"{task} for job {by} ({why})" for task, _, why, by in event.victims))
            do(event)
        for claim in plan.claims:
            book.claim(claim.job_id, claim.node, now)
        out = dict(reasons)
        for job_id, note in plan.notes.items():
            out[job_id] = f"{out[job_id]}; {note}" if out.get(job_id) else note
        return out

    def _input(self, state: MasterState, tree: QueueTree, book: Reservations, cache: EligibleCache,
               now: float, windows: Windows | None = None) -> PreemptionInput:
        view = state.matrix.view()
        held, leaving = _holdings(state)
        # A pinned (federated) job waits for its own node only: the GM that placed it
        # preempts for it (PreemptAndLaunch), this master's fairness never does.
        waiting = [WaitingJob(v.job_id, v.queue, v.demand, v.pending, job_user(state.jobs[v.job_id].spec))
                   for v in state.pending_views()
                   if not pinned_node(state.jobs[v.job_id].spec)]
        claims = [Claim(job, node, count) for job, node, count in book.claims()]

        demands: dict[str, np.ndarray] = {}     # per job: the planner may visit hundreds of nodes
        kills = state.kills

        def running_on(node: str) -> Iterable[RunningTask]:
            for task in state.tasks_on(node, ordered=False):   # the planner orders candidates itself
                if not task.state.holds_resources:
                    continue
                task_id = task.id
                if kills and (task_id, task.attempt) in kills:
                    continue
                spec = state.jobs[task.job_id].spec
                if pinned_node(spec):
                    continue       # a federated task: its GM's to preempt (Alg. 2), not this master's
                demand = demands.get(task.job_id)
                if demand is None:
                    demand = demands[task.job_id] = resource_vector(spec.resources, view.kinds)
                yield RunningTask(task_id, task.job_id, spec.queue, task.started_at or now, demand)

        def eligible(job_id: str) -> np.ndarray | None:
            spec = state.jobs[job_id].spec
            return eligible_rows(spec, parse_constraints(node_requirements(spec)), state.matrix, cache, windows)

        caps = make_capbook(tree, running_holdings(state), state.matrix.total_capacity()) if has_caps(tree) else None
        return PreemptionInput(tree, view, held, waiting, running_on, claims, leaving, book.holders(), eligible,
                               caps=caps, gangs=_gangs(state, view.kinds, now))


def _holdings(state: MasterState) -> tuple[dict[str, Resources], dict[str, Resources]]:
    """Per queue, what tasks hold that are not being stopped; per node, what stopping ones free."""
    held: dict[str, Resources] = {}
    for job_id, counts in state.counts.items():
        running = counts[TaskState.STARTING] + counts[TaskState.RUNNING]
        if running:
            job: Job = state.jobs[job_id]
            held[job.spec.queue] = held.get(job.spec.queue, Resources()) + job.spec.resources.times(running)
    leaving: dict[str, Resources] = {}
    for (task_id, attempt), intent in state.kills.items():
        task = state.task(task_id)
        if task is None or task.attempt != attempt or not task.state.holds_resources:
            continue
        spec = state.jobs[task.job_id].spec
        held[spec.queue] = (held[spec.queue] - spec.resources).clamp_nonnegative()
        leaving[intent.node] = leaving.get(intent.node, Resources()) + spec.resources
    return held, leaving


def _gangs(state: MasterState, kinds: tuple[str, ...], now: float) -> dict[str, tuple[Placed, ...]]:
    """Per gang job, its running members not being stopped: a member's preemption requeues
    the whole gang (master/core/stopping.py), so the planner takes the gang as one victim."""
    gangs: dict[str, tuple[Placed, ...]] = {}
    for job_id, counts in state.counts.items():
        if not counts[TaskState.STARTING] + counts[TaskState.RUNNING]:
            continue
        spec = state.jobs[job_id].spec
        if not spec.gang or pinned_node(spec):
            continue
        demand = resource_vector(spec.resources, kinds)
        members = tuple(Placed(t.node, RunningTask(t.id, job_id, spec.queue, t.started_at or now, demand))
                        for t in state.tasks[job_id]
                        if t.state.holds_resources and (t.id, t.attempt) not in state.kills)
        if members:
            gangs[job_id] = members
    return gangs


def _cpu_seconds(state: MasterState, task_id: str, started_at: float, now: float) -> float:
    """The CPU time the attempt used (its newest sample), else its run time x its request."""
    usage = state.usage.get(task_id)
    if usage is not None and usage.cpu_seconds > 0:
        return float(usage.cpu_seconds)
    task = state.task(task_id)
    cpu = state.jobs[task.job_id].spec.resources.cpu if task is not None else 0.0
    return max(now - started_at, 0.0) * cpu if started_at else 0.0


def make_preemption(settings: Any) -> LivePreemption | None:
    if not settings.preemption:
        return None
    return LivePreemption(PreemptionSettings(
        after_s=settings.preempt_after_s, grace_s=settings.preempt_grace_s,
        min_runtime_s=settings.preempt_min_runtime_s, max_per_round=settings.preempt_max_per_round), settings.seed)
