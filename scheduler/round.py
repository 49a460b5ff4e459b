"""One scheduling round: the fairness policy picks the job, the placement policy picks
the node over the vectorized node state. Pure apart from the NodeMatrix it borrows:
allocations made during the round are tentative and undone exactly before it returns; the
caller commits the placements it gets back."""

from __future__ import annotations

import random
from itertools import chain
from contextlib import contextmanager
from typing import Callable, Iterator, Protocol
from dataclasses import dataclass

import numpy as np

from tcluster.domain.ceilings import asks_of, short_of
from tcluster.domain.constraints import Constraint, parse_constraints
from tcluster.domain.model import Job, JobSpec, Task, TaskState, node_requirements, task_id
from tcluster.scheduler.fairness import FairnessPolicy
from tcluster.scheduler.gangs import gang_rows, place_gang
from tcluster.scheduler.matching import EligibleCache, ceiling_mask
from tcluster.scheduler.nodestate import NodeMatrix, NodeMatrixView
from tcluster.scheduler.placement import PlacementPolicy
from tcluster.scheduler.queues import QueueTree
from tcluster.scheduler.reservations import LargestFree, Reservations
from tcluster.scheduler.reasons import WAITING_FOR_NEXT_ROUND, unplaceable_reason
from tcluster.scheduler.usershare import Held, held_of, user_of
from tcluster.scheduler.views import JobView
from tcluster.scheduler.windows import Windows


@dataclass(frozen=True)
class RoundResult:
    """The plan of one round; the caller commits it (placements) and keeps `holds` as
    the reservations in force for the next round."""
    placements: list[tuple[Placed, str]]   # a Task, or an array index that has no row yet
    pending_reasons: dict[str, str]      # job id -> why its next task waits
    holds: Reservations | None = None


def job_views(jobs: dict[str, Job], tasks: dict[str, list[Task]]) -> list[JobView]:
    views = []
    for job_id, job_tasks in tasks.items():
        job = jobs[job_id]
        pending = sum(1 for t in job_tasks if t.state is TaskState.PENDING) + len(job.unplaced)
        running = sum(1 for t in job_tasks if t.state.holds_resources)
        if job.throttle:
            pending = min(pending, max(job.throttle - running, 0))
        if pending and not job.cancelled and not job.held:
            views.append(JobView(job_id, job.spec.queue, job.submitted_at, job.spec.resources, pending, running,
                                 job.spec.weight, user_of(job.spec.owner, job.spec.user)))
    return views


class Placed(Protocol):
    """What the caller reads of a placed task: a Task, or a PendingIndex."""
    @property
    def id(self) -> str: ...
    @property
    def job_id(self) -> str: ...
    @property
    def index(self) -> int: ...


class PendingIndex:
    """An array index the round places before it has a row: what the caller reads of a
    placed task (its id, job and index), for a fraction of a Task's cost to make. (Not a
    NamedTuple: its `index` field would hide tuple.index.)"""
    __slots__ = ("job_id", "index")

    def __init__(self, job_id: str, index: int) -> None:
        self.job_id = job_id
        self.index = index

    @property
    def id(self) -> str:
        return task_id(self.job_id, self.index)


class _Waiting(dict[str, Iterator[Placed]]):
    """A job's pending tasks, found only when the round first places one of its tasks and
    taken one at a time: a round costs what it places, not the size of every waiting job
    (an array's unplaced indexes become tasks only as they are taken)."""

    def __init__(self, jobs: dict[str, Job], tasks: dict[str, list[Task]]) -> None:
        super().__init__()
        self._jobs, self._tasks = jobs, tasks

    def __missing__(self, job_id: str) -> Iterator[Placed]:
        rows = (t for t in self._tasks[job_id] if t.state is TaskState.PENDING)
        # Not a Task per index: making one cost an array's placements a quarter of a plain
        # job's rate (whose rows exist already); the Place transition makes the one row.
        unplaced = (PendingIndex(job_id, i) for i in self._jobs[job_id].unplaced)
        found: Iterator[Placed] = chain(rows, unplaced)
        self[job_id] = found
        return found


def schedule_round(
    jobs: dict[str, Job], tasks: dict[str, list[Task]], nodes: NodeMatrix,
    fairness: FairnessPolicy, placement: PlacementPolicy, rng: random.Random,
    eligible_cache: EligibleCache | None = None, queues: QueueTree | None = None,
    reservations: Reservations | None = None, now: float = 0.0, views: list[JobView] | None = None,
    windows: Windows | None = None, held: Held | None = None,
) -> RoundResult:
    """`queues` is the fairness tree; `reservations` (kept by the caller across rounds)
    holds nodes for jobs whose next task has waited long enough; `now` dates the waits.
    `views` (pending and running counts per waiting job) saves a scan when the caller
    keeps counts, as the master does. `held`: what each (leaf, user) holds over all its
    jobs (None: counted from `tasks`, which then must hold every job's). `windows`: nodes' maintenance windows ahead
    (scheduler/windows.py); a job starts nowhere it could still run when one opens."""
    views = job_views(jobs, tasks) if views is None else views
    view = nodes.view()
    if not view.schedulable.any():
        return RoundResult([], {v.job_id: "no nodes are ready" for v in views}, reservations)
    cache = eligible_cache or EligibleCache()
    waiting = _Waiting(jobs, tasks)
    placed: dict[str, int] = {}
    placements: list[tuple[Placed, str]] = []
    reasons: dict[str, str] = {}
    # A copy: the caller's ledger changes only when it adopts the plan's holds.
    book = reservations.copy() if reservations is not None else Reservations()
    book.start_round([v.job_id for v in views], view, now)
    for late in book.overdue(now):   # a big task must not starve behind small ones
        spec = jobs[late].spec
        if spec.gang:
            continue                   # a gang holds all it needs, when it is tried (gangs.py)
        book.hold(late, view.request_vector(spec.resources),
                  eligible_rows(spec, parse_constraints(node_requirements(spec)), nodes, cache, windows), view, now)
    if held is None:
        held = held_of((jobs[j].spec.queue, user_of(jobs[j].spec.owner, jobs[j].spec.user), jobs[j].spec.resources,
                        sum(1 for t in ts if t.state.holds_resources)) for j, ts in tasks.items())
    fairness_round = fairness.start_round(views, nodes.total_capacity(), queues, held)
    pending_of = {v.job_id: (v.pending, v.running) for v in views}
    begin = getattr(placement, "begin_round", None)   # a policy with per-round state (lotes, anbf)
    if begin is not None:
        begin()
    end = getattr(placement, "end_round", None)
    with nodes.tentative(), _finally(end):
        most = LargestFree(view)
        while (job_id := fairness_round.next_job()) is not None:
            spec = jobs[job_id].spec
            constraints = parse_constraints(node_requirements(spec))
            matching = eligible_rows(spec, constraints, nodes, cache, windows)
            eligible = book.eligible(job_id, matching, view)   # minus nodes held for others
            request = view.request_vector(spec.resources)
            if spec.gang:     # all of its waiting tasks now, or none
                size, running = pending_of[job_id]
                if running:      # a restart: the members still running stop first
                    reasons[job_id] = f"gang: waiting for its {running} running task(s) to stop before it restarts"
                    fairness_round.skip(job_id)
                    continue
                rows = None if request is None else place_gang(size, spec.resources, request, view, eligible,
                                                               placement, nodes, rng)
                if rows is None:
                    reasons[job_id] = _gang_waits(job_id, size, request, view, matching, book, now)
                    fairness_round.skip(job_id)
                    continue
                for gang_row in rows:
                    node = view.names[gang_row]
                    assert node is not None    # a row place_gang gives holds a node
                    placements.append((next(waiting[job_id]), node))
                    placed[job_id] = placed.get(job_id, 0) + 1
                    book.placed(job_id, node)
                    fairness_round.placed(job_id)
                    most.allocated(gang_row)
                if most.changed:
                    fairness_round.limit(most.resources())
                continue
            row = None if request is None else placement.choose(request, view, eligible, rng)
            if row is None:
                reasons[job_id] = _reason(spec, constraints, nodes, matching, windows)
                kept = book.skipped(job_id, request, eligible, view, now)
                if kept is not None:
                    reasons[job_id] += f"; node {kept.node} is held for it (its tasks waited too long)"
                fairness_round.skip(job_id)
                continue
            node = view.names[row]
            assert node is not None            # a row a policy chooses holds a node
            nodes.allocate(node, spec.resources)
            placements.append((next(waiting[job_id]), node))
            placed[job_id] = placed.get(job_id, 0) + 1
            book.placed(job_id, node)
            fairness_round.placed(job_id)
            most.allocated(row)
            if most.changed:   # the same room again blocks nobody new
                fairness_round.limit(most.resources())   # saturated kinds block who needs them
        left = {v.job_id: v.pending - placed.get(v.job_id, 0) for v in views}
        _explain_waiting(jobs, left, reasons, nodes, cache, book, windows)
    return RoundResult(placements, reasons, book)


def _gang_waits(job_id: str, size: int, request: np.ndarray | None, view: NodeMatrixView,
               matching: np.ndarray | None, book: Reservations, now: float) -> str:
    """Why a gang waits, after it takes its hold (if it is its turn to hold)."""
    reason = f"gang: its {size} tasks do not all fit at once now"
    if request is None:
        return reason
    others = {n for n, r in book.held.items() if r.job_id != job_id}
    held = book.gang_skipped(job_id, gang_rows(size, request, view, matching, others), now)
    if held:
        reason += f"; nodes {', '.join(held[:8])}{' …' if len(held) > 8 else ''} are held for it"
    return reason


def eligible_rows(spec: JobSpec, constraints: tuple[Constraint, ...], nodes: NodeMatrix,
              cache: EligibleCache, windows: Windows | None = None) -> np.ndarray | None:
    """Nodes whose labels meet the constraints, whose ceilings allow the job's
    --pids-max / --log-max and whose maintenance window (if any) the job cannot run
    into (None: every node)."""
    matching = cache.eligible(constraints, nodes)
    for allowed in (ceiling_mask(asks_of(spec), nodes), windows.allowed(spec, nodes) if windows else None):
        if allowed is not None:
            matching = allowed if matching is None else matching & allowed   # a new array: the cached one stays
    return matching


def _reason(spec: JobSpec, constraints: tuple[Constraint, ...], nodes: NodeMatrix,
            matching: np.ndarray | None, windows: Windows | None = None) -> str:
    reason = _plain_reason(spec, constraints, nodes, matching)
    note = _window_note(spec, nodes, windows) if windows is not None else ""
    if not note:
        return reason
    usable = nodes.view().schedulable if matching is None else nodes.view().schedulable & matching
    return f"{reason}; {note}" if usable.any() else note


def _plain_reason(spec: JobSpec, constraints: tuple[Constraint, ...], nodes: NodeMatrix,
                  matching: np.ndarray | None) -> str:
    asks = asks_of(spec)
    if asks:   # no ready node's ceilings allow it (the submit check let it in for a node that is down)
        view = nodes.view()
        ready = [nodes.ceilings[i] for i in np.flatnonzero(view.schedulable)]
        if ready and (short := short_of(asks, ready)):
            return short
    return unplaceable_reason(spec.resources, constraints, nodes, matching)


def _window_note(spec: JobSpec, nodes: NodeMatrix, windows: Windows) -> str:
    """Which ready nodes a maintenance window keeps from the job, and why ("": none)."""
    allowed = windows.allowed(spec, nodes)
    if allowed is None or not (nodes.view().schedulable & ~allowed).any():
        return ""
    return windows.reason(spec)


@contextmanager
def _finally(call: Callable[[], None] | None) -> Iterator[None]:
    try:
        yield
    finally:
        if call is not None:
            call()


def _explain_waiting(jobs: dict[str, Job], waiting: dict[str, int], reasons: dict[str, str],
                     nodes: NodeMatrix, cache: EligibleCache, book: Reservations,
                     windows: Windows | None = None) -> None:
    """Every job still waiting gets a reason, from the state after this round's placements:
    the fairness round stops offering a job whose resource saturated without skipping it."""
    for job_id, left in waiting.items():
        if left <= 0 or job_id in reasons:
            continue
        spec = jobs[job_id].spec
        constraints = parse_constraints(node_requirements(spec))
        reason = _reason(spec, constraints, nodes, eligible_rows(spec, constraints, nodes, cache, windows), windows)
        holder = next((r for r in book.held.values() if r.job_id != job_id), None)
        if reason == WAITING_FOR_NEXT_ROUND and holder is not None:
            reason = f"waiting behind a reservation: node {holder.node} is held for job {holder.job_id}"
        reasons[job_id] = reason
