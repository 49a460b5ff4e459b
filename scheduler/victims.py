"""Victim search on one node for one waiting task: which running tasks to stop so that it
fits there, under the rules that keep preemption from thrashing (README, "Preemption").

A task is a candidate only if its queue is not the preemptor's, its queue is not
protected (`preemptable: false`), it has run `min_runtime_s`, and its queue is above its
target. A gang's running members are one candidate (all of them, on every node, are
stopped: the master requeues a gang whole), which counts whole against the floor and the
final-share rule, and only once the node's other candidates are not enough. Candidates
are taken in order (not a gang, then the nearest relative of the preemptor in the queue
tree, then the queue most over its target, then the most recently started task, then the
least work lost) while each one keeps its queue, and each of its parents that does not
hold the preemptor, at or above its target (scheduler/lineage.py) and, with the
final-share rule, keeps the preemptor's side's normalized share at or below the victim's
side's, the two siblings under their common parent; then a reverse walk drops those not
needed. Pure: shares in, a choice out."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable, Iterable, Literal, Mapping, NamedTuple, Sequence

import numpy as np

from tcluster.scheduler.lineage import Lineage

EPSILON = 1e-9


class Blocked(Enum):
    """Why a starved queue reclaimed nothing for a job this round (a metric label)."""
    EXEMPT = "exempt"               # the tasks that could make room are younger than min_runtime_s
    PROTECTED = "protected"         # they are in queues marked `preemptable: false`
    FINAL_SHARE = "final_share"     # stopping them would leave the preemptor above the victim's standing
    AT_TARGET = "at_target"         # every other queue is at or below its own target
    GANG = "gang"                   # only gangs could make room, and a whole gang would break the rules
    RATE_LIMIT = "rate_limit"       # the round's preemption budget is spent
    NO_FIT = "no_fit"               # no node where stopping allowed tasks would make room


# A queue's verdict: True, never a victim (not counted); a reason, blocked by its queue; None, ask the task.
Verdict = Literal[True] | Blocked | None


class RunningTask(NamedTuple):
    """A task that holds resources on a node and is not already being stopped. A named
    tuple, not a frozen dataclass: the caller builds one for every task on every node
    the planner visits (hundreds of nodes a round), and a tuple is built ~5x faster."""
    task_id: str
    job_id: str
    queue: str
    started_at: float
    demand: np.ndarray          # over the view's kinds


_REASONS = tuple(Blocked)
_EXEMPT, _NO_FIT = _REASONS.index(Blocked.EXEMPT), _REASONS.index(Blocked.NO_FIT)


class Placed(NamedTuple):
    """A running task and its node: a gang's member (the input) or a victim (the choice)."""
    node: str
    task: RunningTask


GangMember = Placed


class _Unit(NamedTuple):
    """What one decision stops: a task, or a gang's running members on every node."""
    queue: str
    members: tuple[Placed, ...]
    here: np.ndarray            # what it frees on the searched node
    total: np.ndarray           # what it frees in all: counted against its queue's floor
    gang: bool
    started_at: float           # its newest member's
    task_id: str                # its first member's (a stable order)


@dataclass(frozen=True)
class NodeChoice:
    node: str
    victims: tuple[Placed, ...]  # a gang's members on other nodes too
    lost_work: float            # sum of run time x dominant share: what the victims lose
    gangs: int = 0              # whole gangs among them


@dataclass
class Standing:
    """Per queue, what the planner knows while it plans (changed as victims are chosen)."""
    usage: np.ndarray           # held + claimed, over the view's kinds
    target: float               # min(guaranteed share, demand's dominant share)
    guarantee: float            # the queue's guaranteed share (weights down the tree)
    protected: bool = False


class Search:
    """Victims for one task of `queue` asking `request`, node by node. `gangs`: per gang
    job, its running members that are not being stopped (on every node)."""

    def __init__(self, queue: str, request: np.ndarray, standings: dict[str, Standing],
                 share: Callable[[np.ndarray], float], now: float, min_runtime_s: float,
                 final_share_rule: bool = True, victim_floor: bool = True, lineage: Lineage | None = None,
                 gangs: Mapping[str, Sequence[Placed]] | None = None) -> None:
        self.queue, self.request, self.standings, self.share = queue, request, standings, share
        self.now, self.min_runtime_s = now, min_runtime_s
        self.final_share_rule, self.victim_floor = final_share_rule, victim_floor
        self.lineage, self.gangs = lineage, gangs or {}
        self._why = [0] * len(_REASONS)    # per reason, by position: an Enum hashes in Python (per task)
        # Standings do not change during one search: what depends only on a task's queue
        # (or its job's demand) is worked out once, not per task (hundreds of nodes a search).
        self._preemptor_after: dict[str, float] = {}
        self._verdicts: dict[str, Verdict] = {}
        self._shares: dict[str, float] = {}
        self._demand_shares: dict[str, float] = {}
        self._chains: dict[str, tuple[tuple[str, ...], str, str, int]] = {}
        self._need = request - EPSILON

    def on_node(self, node: str, room: np.ndarray, tasks: Iterable[RunningTask]) -> NodeChoice | None:
        """`room`: what the node has free for this task now (plus what is already leaving)."""
        if (room >= self._need).all():
            return NodeChoice(node, (), 0.0)
        candidates = self._units(node, [t for t in tasks if self._allowed(t)])
        if len(candidates) > 1:
            candidates.sort(key=self._order)
        chosen: list[_Unit] = []
        taken: dict[str, np.ndarray] = {}
        for unit in candidates:
            if not self._keeps_standing(unit, taken):
                continue
            chosen.append(unit)
            for queue in self._chain(unit.queue)[0]:
                taken[queue] = taken.get(queue, 0) + unit.total
            room = room + unit.here
            if (room >= self._need).all():
                return self._trimmed(node, chosen, room)
        if candidates:
            self._why[_NO_FIT] += 1
        return None

    def _units(self, node: str, tasks: list[RunningTask]) -> list[_Unit]:
        """Each task alone, except a gang's: one unit of all its members, if all may go."""
        units: list[_Unit] = []
        gangs: set[str] = set()
        for task in tasks:
            members = self.gangs.get(task.job_id)
            if not members:
                units.append(_Unit(task.queue, (Placed(node, task),), task.demand, task.demand, False,
                                   task.started_at, task.task_id))
            elif task.job_id not in gangs:
                gangs.add(task.job_id)
                unit = self._gang_unit(node, tuple(members))
                if unit is not None:
                    units.append(unit)
        return units

    def _gang_unit(self, node: str, members: tuple[Placed, ...]) -> _Unit | None:
        if any(self.now - m.task.started_at < self.min_runtime_s for m in members):
            self._why[_EXEMPT] += 1
            return None
        here = sum((m.task.demand for m in members if m.node == node), np.zeros_like(self.request))
        total = sum((m.task.demand for m in members), np.zeros_like(self.request))
        first = members[0].task
        return _Unit(first.queue, members, here, total, True, max(m.task.started_at for m in members),
                     first.task_id)

    def blocked(self) -> Blocked:
        """The reason to report when no node worked: the one met most often."""
        if not any(self._why):
            return Blocked.NO_FIT
        most = max(range(len(_REASONS)), key=lambda i: (self._why[i], -i))   # ties: the earlier reason
        return _REASONS[most]

    @property
    def why(self) -> dict[Blocked, int]:
        return {b: n for b, n in zip(_REASONS, self._why) if n}

    def _allowed(self, task: RunningTask) -> bool:
        verdict = self._verdicts.get(task.queue, False)
        if verdict is False:
            verdict = self._verdicts[task.queue] = self._queue_verdict(task.queue)
        if verdict is True:
            return False        # its own queue, or one the planner has no standing for
        if verdict is not None:
            return self._count(verdict)
        if self.now - task.started_at < self.min_runtime_s:
            self._why[_EXEMPT] += 1
            return False
        return True

    def _queue_verdict(self, queue: str) -> Verdict:
        """True: never a victim, not counted; a reason: blocked by its queue; None: ask the task."""
        if queue == self.queue:
            return True         # a queue never preempts itself (its own jobs share by weight)
        standing = self.standings.get(queue)
        if standing is None:
            return True
        if standing.protected:
            return Blocked.PROTECTED
        if self.victim_floor and any(self._queue_share(q) <= self.standings[q].target + EPSILON
                                     for q in self._chain(queue)[0]):
            return Blocked.AT_TARGET
        return None

    def _chain(self, queue: str) -> tuple[tuple[str, ...], str, str, int]:
        """The victim's queues that lose (itself, its parents below the common one), the
        two sides under the common parent (victim's, preemptor's), and that parent's depth."""
        found = self._chains.get(queue)
        if found is None:
            if self.lineage is None:
                found = ((queue,), queue, self.queue, 0)
            else:
                theirs, mine = self.lineage.sides(queue, self.queue)
                found = (self.lineage.below_common(queue, self.queue), theirs, mine,
                         self.lineage.depth_in_common(queue, self.queue))
            self._chains[queue] = found
        return found

    def _queue_share(self, queue: str) -> float:
        found = self._shares.get(queue)
        if found is None:
            found = self._shares[queue] = self.share(self.standings[queue].usage)
        return found

    def _keeps_standing(self, unit: _Unit, taken: dict[str, np.ndarray]) -> bool:
        losing, theirs, mine, _ = self._chain(unit.queue)
        refused = Blocked.GANG if unit.gang else Blocked.AT_TARGET
        for queue in losing:
            standing = self.standings[queue]
            after = self.share(standing.usage - taken.get(queue, 0) - unit.total)
            if self.victim_floor and after < standing.target - EPSILON:
                return self._count(refused)
        if self.final_share_rule:
            side = self.standings[theirs]
            after = self.share(side.usage - taken.get(theirs, 0) - unit.total)
            if self._preemptor_side_after(mine) > _normalized(after, side.guarantee) + EPSILON:
                return self._count(Blocked.GANG if unit.gang else Blocked.FINAL_SHARE)
        return True

    def _preemptor_side_after(self, side: str) -> float:
        found = self._preemptor_after.get(side)
        if found is None:
            standing = self.standings[side]
            found = self._preemptor_after[side] = _normalized(self.share(standing.usage + self.request),
                                                              standing.guarantee)
        return found

    def _order(self, unit: _Unit) -> tuple[bool, int, float, float, float, str]:
        over = self._queue_share(unit.queue) - self.standings[unit.queue].target
        return (unit.gang, -self._chain(unit.queue)[3], -over, -unit.started_at, self._unit_lost(unit), unit.task_id)

    def _lost(self, task: RunningTask) -> float:
        share = self._demand_shares.get(task.job_id)
        if share is None:       # a job's tasks all ask the same
            share = self._demand_shares[task.job_id] = self.share(task.demand)
        return max(self.now - task.started_at, 0.0) * share

    def _unit_lost(self, unit: _Unit) -> float:
        if len(unit.members) == 1:      # not a gang: the common case, per candidate
            return self._lost(unit.members[0].task)
        return sum(self._lost(m.task) for m in unit.members)

    def _trimmed(self, node: str, chosen: list[_Unit], room: np.ndarray) -> NodeChoice:
        """Kueue's reverse walk: drop each victim, last chosen first, whose room is not needed."""
        kept = list(chosen)
        for unit in reversed(chosen[:-1]):
            if (room - unit.here >= self._need).all():
                kept.remove(unit)
                room = room - unit.here
        victims = tuple(m for unit in kept for m in unit.members)
        return NodeChoice(node, victims, sum(self._unit_lost(u) for u in kept), sum(u.gang for u in kept))

    def _count(self, why: Blocked) -> bool:
        self._why[_REASONS.index(why)] += 1
        return False


def _normalized(share: float, guarantee: float) -> float:
    """A share against what the queue is guaranteed: equal standing is equal normalized share."""
    return share / guarantee if guarantee > 0 else float("inf")


def cheapest(choices: Sequence[NodeChoice]) -> NodeChoice | None:
    """A node without a gang among its victims, then the one whose victims lose the least
    work, then the fewest victims, then by name."""
    return min(choices, key=lambda c: (c.gangs > 0, c.lost_work, len(c.victims), c.node), default=None)
