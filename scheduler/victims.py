"""Victim search on one node for one waiting task: which running tasks to stop so that it
fits there, under the rules that keep preemption from thrashing (README, "Preemption").

A task is a candidate only if its queue is not the preemptor's, its queue is not
protected (`preemptable: false`), it has run `min_runtime_s`, and its queue is above its
target. Candidates are taken in order (the queue most over its target, then the most
recently started task, then the least work lost) while each one keeps its queue at or
above its target and, with the final-share rule, keeps the preemptor queue's normalized
share at or below the victim queue's; then a reverse walk drops those not needed.
Pure: shares in, a choice out."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable, Iterable, Sequence

import numpy as np

EPSILON = 1e-9


class Blocked(Enum):
    """Why a starved queue reclaimed nothing for a job this round (a metric label)."""
    EXEMPT = "exempt"               # the tasks that could make room are younger than min_runtime_s
    PROTECTED = "protected"         # they are in queues marked `preemptable: false`
    FINAL_SHARE = "final_share"     # stopping them would leave the preemptor above the victim's standing
    AT_TARGET = "at_target"         # every other queue is at or below its own target
    RATE_LIMIT = "rate_limit"       # the round's preemption budget is spent
    NO_FIT = "no_fit"               # no node where stopping allowed tasks would make room


@dataclass(frozen=True)
class RunningTask:
    """A task that holds resources on a node and is not already being stopped."""
    task_id: str
    job_id: str
    queue: str
    started_at: float
    demand: np.ndarray          # over the view's kinds


@dataclass(frozen=True)
class NodeChoice:
    node: str
    victims: tuple[RunningTask, ...]
    lost_work: float            # sum of run time x dominant share: what the victims lose


@dataclass
class Standing:
    """Per queue, what the planner knows while it plans (changed as victims are chosen)."""
    usage: np.ndarray           # held + claimed, over the view's kinds
    target: float               # min(guaranteed share, demand's dominant share)
    guarantee: float            # the queue's guaranteed share (weights down the tree)
    protected: bool = False


class Search:
    """Victims for one task of `queue` asking `request`, node by node."""

    def __init__(self, queue: str, request: np.ndarray, standings: dict[str, Standing],
                 share: Callable[[np.ndarray], float], now: float, min_runtime_s: float,
                 final_share_rule: bool = True, victim_floor: bool = True) -> None:
        self.queue, self.request, self.standings, self.share = queue, request, standings, share
        self.now, self.min_runtime_s = now, min_runtime_s
        self.final_share_rule, self.victim_floor = final_share_rule, victim_floor
        self.why: dict[Blocked, int] = {}
        preemptor = standings[queue]
        self._preemptor_after = _normalized(share(preemptor.usage + request), preemptor.guarantee)

    def on_node(self, node: str, room: np.ndarray, tasks: Iterable[RunningTask]) -> NodeChoice | None:
        """`room`: what the node has free for this task now (plus what is already leaving)."""
        if np.all(room >= self.request - EPSILON):
            return NodeChoice(node, (), 0.0)
        candidates = sorted((t for t in tasks if self._allowed(t)), key=self._order)
        chosen: list[RunningTask] = []
        taken: dict[str, np.ndarray] = {}
        for task in candidates:
            if not self._keeps_standing(task, taken):
                continue
            chosen.append(task)
            taken[task.queue] = taken.get(task.queue, 0) + task.demand
            room = room + task.demand
            if np.all(room >= self.request - EPSILON):
                return NodeChoice(node, *self._trimmed(chosen, room))
        if candidates:
            self._count(Blocked.NO_FIT)
        return None

    def blocked(self) -> Blocked:
        """The reason to report when no node worked: the one met most often."""
        if not self.why:
            return Blocked.NO_FIT
        order = list(Blocked)
        return max(self.why, key=lambda b: (self.why[b], -order.index(b)))

    def _allowed(self, task: RunningTask) -> bool:
        if task.queue == self.queue:
            return False        # a queue never preempts itself (its own jobs share by weight)
        standing = self.standings.get(task.queue)
        if standing is None:
            return False
        if standing.protected:
            return self._count(Blocked.PROTECTED)
        if self.victim_floor and self.share(standing.usage) <= standing.target + EPSILON:
            return self._count(Blocked.AT_TARGET)
        if self.now - task.started_at < self.min_runtime_s:
            return self._count(Blocked.EXEMPT)
        return True

    def _keeps_standing(self, task: RunningTask, taken: dict[str, np.ndarray]) -> bool:
        standing = self.standings[task.queue]
        after = self.share(standing.usage - taken.get(task.queue, 0) - task.demand)
        if self.victim_floor and after < standing.target - EPSILON:
            return self._count(Blocked.AT_TARGET)
        if self.final_share_rule and self._preemptor_after > _normalized(after, standing.guarantee) + EPSILON:
            return self._count(Blocked.FINAL_SHARE)
        return True

    def _order(self, task: RunningTask) -> tuple[float, float, float, str]:
        standing = self.standings[task.queue]
        over = self.share(standing.usage) - standing.target
        return (-over, -task.started_at, self._lost(task), task.task_id)

    def _lost(self, task: RunningTask) -> float:
        return max(self.now - task.started_at, 0.0) * self.share(task.demand)

    def _trimmed(self, chosen: list[RunningTask], room: np.ndarray) -> tuple[tuple[RunningTask, ...], float]:
        """Kueue's reverse walk: drop each victim, last chosen first, whose room is not needed."""
        kept = list(chosen)
        for task in reversed(chosen[:-1]):
            if np.all(room - task.demand >= self.request - EPSILON):
                kept.remove(task)
                room = room - task.demand
        return tuple(kept), sum(self._lost(t) for t in kept)

    def _count(self, why: Blocked) -> bool:
        self.why[why] = self.why.get(why, 0) + 1
        return False


def _normalized(share: float, guarantee: float) -> float:
    """A share against what the queue is guaranteed: equal standing is equal normalized share."""
    return share / guarantee if guarantee > 0 else float("inf")


def cheapest(choices: Sequence[NodeChoice]) -> NodeChoice | None:
    """The node whose victims lose the least work, then the fewest victims, then by name."""
    return min(choices, key=lambda c: (c.lost_work, len(c.victims), c.node), default=None)
