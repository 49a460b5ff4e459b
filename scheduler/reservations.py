"""Reservations: a big task must not wait forever behind a stream of small ones.

Skipping what fits nowhere avoids head-of-line blocking, but it starves a large task:
every time a little room frees up, a small task takes it first. So, as in YARN's
capacity scheduler, a job that has had tasks pending but placed none for
`reserve_after_s` gets one node held for it (checked at the start of every round, and
whenever the round finds that it fits nowhere). The held node is the one that needs the least to free up (normalized
shortfall) among those big enough. No other job's task is placed there, and the
tasks already running on it finish, so the room grows until the held task fits.
A job holds at most one node, and a node is held for at most one job. The hold ends
when the job places a task anywhere, has nothing pending, or the node stops being
schedulable.

The ledger is state kept across rounds by its owner (the master or the simulator);
`now` is passed in."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

import numpy as np

from tcluster.domain.resources import Resources
from tcluster.scheduler.nodestate import NodeMatrixView

DEFAULT_RESERVE_AFTER_S = 30.0


@dataclass(frozen=True)
class Reservation:
    job_id: str
    node: str
    since: float
    claimed: int = 0    # > 0: a preemption's hold: room being freed there for this many tasks
    gang: bool = False  # one of the nodes held for a gang (it may hold several)


PREEMPT_HOLD_SLACK_S = 60.0   # a claim outlives its victims' grace by this much at most


class Reservations:
    def __init__(self, reserve_after_s: float = DEFAULT_RESERVE_AFTER_S, claim_for_s: float = float("inf")) -> None:
        self.reserve_after_s = reserve_after_s
        self.claim_for_s = claim_for_s              # a preemption's hold ends after this, placed or not
        self.waiting_since: dict[str, float] = {}   # job -> when its next task first fitted nowhere
        self.held: dict[str, Reservation] = {}      # node -> its reservation

    def copy(self) -> Reservations:
        other = Reservations(self.reserve_after_s, self.claim_for_s)
        other.waiting_since, other.held = dict(self.waiting_since), dict(self.held)
        return other

    def start_round(self, pending_jobs: Iterable[str], view: NodeMatrixView, now: float) -> None:
        """Starts the clock of newly pending jobs; forgets jobs with nothing pending and
        nodes that are not schedulable."""
        pending = set(pending_jobs)
        self.waiting_since = {j: self.waiting_since.get(j, now) for j in sorted(pending)}
        if not self.held:    # the usual round: no pass over every node's name (issue 38's profile)
            return
        schedulable = {name for name, ok in zip(view.names, view.schedulable.tolist()) if ok}
        self.held = {n: r for n, r in self.held.items() if n in schedulable and r.job_id in pending
                     and not (r.claimed and now - r.since > self.claim_for_s)}

    def overdue(self, now: float) -> list[str]:
        """Jobs that placed nothing for reserve_after_s and hold no node, longest first."""
        held = {r.job_id for r in self.held.values()}
        waits = sorted((since, job) for job, since in self.waiting_since.items() if job not in held)
        return [job for since, job in waits if now - since >= self.reserve_after_s]

    def eligible(self, job_id: str, eligible: np.ndarray | None, view: NodeMatrixView) -> np.ndarray | None:
        """`eligible` minus the nodes held for other jobs."""
        others = [n for n, r in self.held.items() if r.job_id != job_id]
        if not others:
            return eligible
        mask = np.ones(len(view.names), dtype=bool) if eligible is None else eligible.copy()
        for name in others:
            row = view.rows.get(name)
            if row is not None:
                mask[row] = False
        return mask

    def placed(self, job_id: str, node: str = "") -> None:
        """A task of the job was placed on `node`: its waiting hold ends; a preemption's
        hold there serves one task fewer (and holds elsewhere stay: their room is coming)."""
        self.waiting_since.pop(job_id, None)
        kept = {}
        for name, r in self.held.items():
            if r.job_id != job_id or (r.claimed and name != node):
                kept[name] = r
            elif r.claimed > 1 and name == node:
                kept[name] = replace(r, claimed=r.claimed - 1)
        self.held = kept

    def claim(self, job_id: str, node: str, now: float) -> None:
        """A preemption frees room on `node` for one more task of the job: hold it for the job."""
        r = self.held.get(node)
        if r is not None and r.job_id != job_id:
            return          # the planner never picks a node held for another job
        self.held[node] = Reservation(job_id, node, now, (r.claimed if r is not None else 0) + 1)

    def gang_skipped(self, job_id: str, nodes: list[str], now: float) -> list[str]:
        """A gang fit nowhere this round: once it has waited reserve_after_s, and if no other
        gang holds, `nodes` (gangs.gang_rows) are held for it. Returns the gang's holds."""
        since = self.waiting_since.setdefault(job_id, now)
        other_gang = any(r.gang and r.job_id != job_id for r in self.held.values())
        if now - since >= self.reserve_after_s and not other_gang and not self.holding(job_id):
            for node in nodes:
                if node not in self.held:
                    self.held[node] = Reservation(job_id, node, now, gang=True)
        return sorted(n for n, r in self.held.items() if r.job_id == job_id)

    def claims(self) -> list[tuple[str, str, int]]:
        """(job, node, tasks) for every preemption hold."""
        return [(r.job_id, r.node, r.claimed) for r in self.held.values() if r.claimed]

    def holders(self) -> dict[str, str]:
        """node -> job, for the waiting holds (not preemption's)."""
        return {n: r.job_id for n, r in self.held.items() if not r.claimed}

    def holding(self, job_id: str) -> Reservation | None:
        return next((r for r in self.held.values() if r.job_id == job_id), None)

    def skipped(self, job_id: str, request: np.ndarray | None, eligible: np.ndarray | None,
                view: NodeMatrixView, now: float) -> Reservation | None:
        """The round found no node for the job: hold one if it has waited long enough.
        Returns the job's hold, if it has one."""
        since = self.waiting_since.setdefault(job_id, now)
        if now - since >= self.reserve_after_s:
            self.hold(job_id, request, eligible, view, now)
        return self.holding(job_id)

    def hold(self, job_id: str, request: np.ndarray | None, eligible: np.ndarray | None,
             view: NodeMatrixView, now: float) -> Reservation | None:
        """Holds the least-short node for the job (the one where it fits, if any does:
        it may fit now and still lose every round's ties to smaller, older jobs)."""
        if request is None or self.holding(job_id) is not None:
            return self.holding(job_id)
        row = _least_short_row(request, eligible, view, set(self.held))
        node = None if row is None else view.names[row]    # (a row it returns holds a node)
        if node is None:
            return None
        reservation = Reservation(job_id, node, now)
        self.held[reservation.node] = reservation
        return reservation


def _least_short_row(request: np.ndarray, eligible: np.ndarray | None, view: NodeMatrixView,
                     taken: set[str]) -> int | None:
    ok = view.schedulable.copy() if eligible is None else np.logical_and(eligible, view.schedulable)
    ok &= np.all(view.capacity >= request - 1e-9, axis=1)      # big enough when empty
    for i, name in enumerate(view.names):
        if name in taken:
            ok[i] = False
    if not ok.any():
        return None
    short = np.maximum(request[None, :] - view.free, 0.0) / view.scale[None, :]
    return int(np.where(ok, short.sum(axis=1), np.inf).argmin())


def largest_free(view: NodeMatrixView) -> Resources:
    """The most any one schedulable node has free, per kind (for FairnessRound.limit)."""
    rows = view.free[view.schedulable]
    most = rows.max(axis=0) if len(rows) else np.zeros(len(view.kinds))
    return Resources.of(dict(zip(view.kinds, most.tolist())))


class LargestFree:
    """largest_free through one round, without scanning every node after each placement:
    within a round free space only shrinks, and only on the node that got the task, so a
    kind's maximum changes only when the node holding it got one; then that kind alone is
    searched again. The same values as largest_free(view) after each allocation."""

    def __init__(self, view: NodeMatrixView) -> None:
        self._view = view
        self._holders = [self._holder(kind) for kind in range(len(view.kinds))]
        self._most = [self._value(kind, row) for kind, row in enumerate(self._holders)]
        self._told = False   # the first placement always reports, as a scan after it did
        self.changed = True

    def _holder(self, kind: int) -> int | None:
        if not self._view.schedulable.any():
            return None
        return int(np.where(self._view.schedulable, self._view.free_by_kind[kind], -np.inf).argmax())

    def _value(self, kind: int, row: int | None) -> float:
        return 0.0 if row is None else float(self._view.free_by_kind[kind, row])

    def allocated(self, row: int) -> None:
        """The round put a task on `row`; `changed`: a maximum moved (or none was reported yet)."""
        self.changed, self._told = not self._told, True
        for kind, holder in enumerate(self._holders):
            if holder == row:   # other rows did not change: only a held maximum can move
                self._holders[kind] = holder = self._holder(kind)
                most = self._value(kind, holder)
                self.changed |= most != self._most[kind]
                self._most[kind] = most

    def values(self) -> list[float]:
        return list(self._most)

    def resources(self) -> Resources:
        return Resources.of(dict(zip(self._view.kinds, self._most)))
