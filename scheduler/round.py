"""One scheduling round: the fairness policy picks the job, the placement policy picks
the node over the vectorized node state. Pure apart from the NodeMatrix it borrows:
allocations made during the round are tentative and undone exactly before it returns; the
caller commits the placements it gets back."""

from __future__ import annotations

import random
from itertools import chain
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Protocol
from dataclasses import dataclass, field

import numpy as np

from tcluster.domain.ceilings import asks_of, short_of
from tcluster.domain.constraints import Constraint, parse_constraints
from tcluster.domain.model import Job, JobSpec, Task, TaskState, node_requirements, task_id
from tcluster.scheduler.capbook import CapBook, Holding, has_caps, make_capbook
from tcluster.scheduler.backfill import Hold, RunningEnds, decide, delay_note, estimates
from tcluster.scheduler.fairness import FairnessPolicy
from tcluster.scheduler.gangs import gang_rows, place_gang
from tcluster.scheduler.matching import EligibleCache, ceiling_mask
from tcluster.scheduler.nodestate import NodeMatrix, NodeMatrixView
from tcluster.scheduler.placement import PlacementPolicy
from tcluster.scheduler.queues import QueueTree
from tcluster.scheduler.quotas import job_user
from tcluster.scheduler.reservations import LargestFree, Reservations
from tcluster.scheduler.reasons import WAITING_FOR_NEXT_ROUND, unplaceable_reason
from tcluster.scheduler.usershare import Held, held_of, user_of
from tcluster.scheduler.views import JobView
from tcluster.scheduler.windows import Windows, time_limit_of


@dataclass(frozen=True)
class RoundResult:
    """The plan of one round; the caller commits it (placements) and keeps `holds` as
    the reservations in force for the next round."""
    placements: list[tuple[Placed, str]]   # a Task, or an array index that has no row yet
    pending_reasons: dict[str, str]      # job id -> why its next task waits
    holds: Reservations | None = None
    backfilled: dict[str, str] = field(default_factory=dict)   # job id -> the job whose room it started on
    estimates: dict[str, float | None] = field(default_factory=dict)   # holding job -> its earliest start estimate


def job_views(jobs: dict[str, Job], tasks: dict[str, list[Task]]) -> list[JobView]:
    views = []
    for job_id, job_tasks in tasks.items():
        job = jobs[job_id]
        pending = sum(1 for t in job_tasks if t.state is TaskState.PENDING) + len(job.unplaced)
        running = sum(1 for t in job_tasks if t.state.holds_resources)
        if job.throttle:
            pending = min(pending, max(job.throttle - running, 0))
        if pending and not job.cancelled and not job.kept_back:
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
    holdings: Iterable[Holding] | None = None, running_ends: RunningEnds | None = None,
    caps_tree: QueueTree | None = None,
) -> RoundResult:
    """`queues` is the fairness tree; `reservations` (kept by the caller across rounds)
    holds nodes for jobs whose next task has waited long enough; `now` dates the waits.
    `views` (pending and running counts per waiting job) saves a scan when the caller
    keeps counts, as the master does. `held`: what each (leaf, user) holds over all its
    jobs (None: counted from `tasks`, which then must hold every job's). `windows`: nodes'
    maintenance windows ahead (scheduler/windows.py); a job starts nowhere it could still
    run when one opens. `holdings`: what runs, per leaf queue and user, for the queues'
    quotas (scheduler/capbook.py); None: only the running tasks in `tasks` count.
    `caps_tree`: the tree whose quotas hold (the file's, when `queues` carries weights
    that decayed usage moved; default `queues`). `running_ends`: the latest ends of the
    tasks on the held nodes, for backfill (scheduler/backfill.py); None: backfill off,
    held room takes no other job."""
    views = job_views(jobs, tasks) if views is None else views
    caps_tree = queues if caps_tree is None else caps_tree
    caps = None if not has_caps(caps_tree) else \
        make_capbook(caps_tree, _holdings(jobs, tasks) if holdings is None else holdings, nodes.total_capacity())
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
        if spec.gang or _capped(caps, spec, 1):
            continue                   # a gang holds all it needs, when it is tried (gangs.py); a capped job nothing
        book.hold(late, view.request_vector(spec.resources),
                  eligible_rows(spec, parse_constraints(node_requirements(spec)), nodes, cache, windows), view, now)
    if held is None:
        held = held_of((jobs[j].spec.queue, user_of(jobs[j].spec.owner, jobs[j].spec.user), jobs[j].spec.resources,
                        sum(1 for t in ts if t.state.holds_resources)) for j, ts in tasks.items())
    fairness_round = fairness.start_round(views, nodes.total_capacity(), queues, held)
    pending_of = {v.job_id: (v.pending, v.running) for v in views}
    holds = _holds(jobs, pending_of, book, view, running_ends, now) if running_ends is not None else {}
    backfilled: dict[str, str] = {}
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
            capped = _capped(caps, spec, pending_of[job_id][0] if spec.gang else 1)
            if capped is not None:      # a queue or user at a quota: nothing starts, however idle the nodes
                reasons[job_id] = capped
                fairness_round.skip(job_id)
                continue
            if spec.gang:     # all of its waiting tasks now, or none
                size, running = pending_of[job_id]
                if running:      # a restart: the members still running stop first
                    reasons[job_id] = f"gang: waiting for its {running} running task(s) to stop before it restarts"
                    fairness_round.skip(job_id)
                    continue
                rows = None if request is None else place_gang(size, spec.resources, request, view, eligible,
                                                               placement, nodes, rng)
                wider = _backfill_room(job_id, spec, request, view, eligible, matching, holds, now) \
                    if rows is None and holds and request is not None else None
                if wider is not None and wider.allowed and request is not None:
                    rows = place_gang(size, spec.resources, request, view, wider.eligible, placement, nodes, rng)
                    _note_backfill(job_id, rows or [], view, wider, backfilled)
                if rows is None:
                    reasons[job_id] = _gang_waits(job_id, size, request, view, matching, book, now)
                    if wider is not None and wider.delays:
                        reasons[job_id] += f"; {wider.delays}"
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
                if caps is not None:
                    caps.add(spec.queue, job_user(spec), spec.resources, len(rows))
                if most.changed:
                    fairness_round.limit(most.resources())
                continue
            row = None if request is None else placement.choose(request, view, eligible, rng)
            wider = _backfill_room(job_id, spec, request, view, eligible, matching, holds, now) \
                if row is None and holds and request is not None else None
            if wider is not None and wider.allowed and request is not None:
                row = placement.choose(request, view, wider.eligible, rng)
                _note_backfill(job_id, [] if row is None else [row], view, wider, backfilled)
            if row is None:
                reasons[job_id] = _reason(spec, constraints, nodes, matching, windows)
                if wider is not None and wider.delays:
                    reasons[job_id] += f"; {wider.delays}"
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
            if caps is not None:
                caps.add(spec.queue, job_user(spec), spec.resources)
            if most.changed:   # the same room again blocks nobody new
                fairness_round.limit(most.resources())   # saturated kinds block who needs them
        left = {v.job_id: v.pending - placed.get(v.job_id, 0) for v in views}
        _explain_waiting(jobs, left, reasons, nodes, cache, book, windows, caps, holds, now)
    return RoundResult(placements, reasons, book, backfilled, {j: h.estimate for j, h in holds.items()})


def _holds(jobs: dict[str, Job], pending_of: dict[str, tuple[int, int]], book: Reservations,
           view: NodeMatrixView, running_ends: RunningEnds, now: float) -> dict[str, Hold]:
    """The waiting reservations in force at the round's start, each with its estimate: a
    gang waits to place all its pending tasks together, a starving job one task."""
    holders = book.holders()
    sizes = {}
    for job_id in set(holders.values()):
        spec = jobs[job_id].spec if job_id in jobs else None
        if spec is not None:
            size = pending_of.get(job_id, (0, 0))[0] if spec.gang else 1
            sizes[job_id] = (size, view.request_vector(spec.resources))
    return estimates(holders, sizes, view.rows, view.free, running_ends, now)


@dataclass(frozen=True)
class _Wider:
    """A job's eligible rows with the held room it may backfill (`allowed`: node -> its
    holder), and the note for the holders whose room it may not use ("" if none would fit it)."""
    eligible: np.ndarray | None
    allowed: dict[str, str]
    delays: str


def _backfill_room(job_id: str, spec: JobSpec, request: np.ndarray, view: NodeMatrixView,
                   eligible: np.ndarray | None, matching: np.ndarray | None, holds: dict[str, Hold],
                   now: float) -> _Wider:
    decision = decide(job_id, time_limit_of(spec), holds.values(), now)
    wider = eligible      # a new mask only when it widens: most jobs that fit nowhere backfill nowhere
    if decision.allowed:
        wider = np.ones(len(view.names), dtype=bool) if eligible is None else eligible.copy()
        for node in decision.allowed:
            row = view.rows.get(node)
            if row is not None:
                wider[row] = True if matching is None else bool(matching[row])
    refused = [row for hold in holds.values() if hold.job_id in decision.delays
               for node in hold.nodes if (row := view.rows.get(node)) is not None
               and (matching is None or matching[row]) and view.schedulable[row]
               and bool(np.all(view.free[row] >= request - 1e-9))]
    return _Wider(wider, decision.allowed, delay_note(decision.delays) if refused else "")


def _note_backfill(job_id: str, rows: list[int], view: NodeMatrixView, wider: _Wider,
                   backfilled: dict[str, str]) -> None:
    """The job started (partly) on held room: remember whose, for `tcl why`."""
    for row in rows:
        holder = wider.allowed.get(str(view.names[row]))
        if holder is not None:
            backfilled[job_id] = holder


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
                     windows: Windows | None = None, caps: CapBook | None = None,
                     holds: dict[str, Hold] | None = None, now: float = 0.0) -> None:
    """Every job still waiting gets a reason, from the state after this round's placements:
    the fairness round stops offering a job whose resource saturated without skipping it."""
    for job_id, left in waiting.items():
        if left <= 0 or job_id in reasons:
            continue
        spec = jobs[job_id].spec
        capped = _capped(caps, spec, left if spec.gang else 1)
        if capped is not None:
            reasons[job_id] = capped
            continue
        constraints = parse_constraints(node_requirements(spec))
        reason = _reason(spec, constraints, nodes, eligible_rows(spec, constraints, nodes, cache, windows), windows)
        holder = next((r for r in book.held.values() if r.job_id != job_id), None)
        if reason == WAITING_FOR_NEXT_ROUND and holder is not None:
            reason = f"waiting behind a reservation: node {holder.node} is held for job {holder.job_id}"
            delays = decide(job_id, time_limit_of(spec), holds.values(), now).delays if holds else ()
            if delays:
                reason += f" ({delay_note(delays)})"
        reasons[job_id] = reason


def _capped(caps: CapBook | None, spec: JobSpec, count: int) -> str | None:
    """Which queue quota (scheduler/quotas.py) keeps `count` more tasks from starting."""
    return None if caps is None else caps.blocks(spec.queue, job_user(spec), spec.resources, count)


def _holdings(jobs: dict[str, Job], tasks: dict[str, list[Task]]) -> list[Holding]:
    """What the given tasks hold, per job (when the caller keeps no count of its own)."""
    held = []
    for job_id, job_tasks in tasks.items():
        running = sum(1 for t in job_tasks if t.state.holds_resources)
        if running:
            spec = jobs[job_id].spec
            held.append(Holding(spec.queue, job_user(spec), spec.resources, running))
    return held
