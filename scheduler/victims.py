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
from typing import Callable, Iterable, Literal, NamedTuple, Sequence

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
        self._why = [0] * len(_REASONS)    # per reason, by position: an Enum hashes in Python (per task)
        preemptor = standings[queue]
        self._preemptor_after = _normalized(share(preemptor.usage + request), preemptor.guarantee)
        # Standings do not change during one search: what depends only on a task's queue
        # (or its job's demand) is worked out once, not per task (hundreds of nodes a search).
        self._verdicts: dict[str, Verdict] = {}
        self._shares: dict[str, float] = {}
        self._demand_shares: dict[str, float] = {}
        self._need = request - EPSILON

    def on_node(self, node: str, room: np.ndarray, tasks: Iterable[RunningTask]) -> NodeChoice | None:
        """`room`: what the node has free for this task now (plus what is already leaving)."""
        if (room >= self._need).all():
            return NodeChoice(node, (), 0.0)
        candidates = [t for t in tasks if self._allowed(t)]
        if len(candidates) > 1:
            candidates.sort(key=self._order)
        chosen: list[RunningTask] = []
        taken: dict[str, np.ndarray] = {}
        for task in candidates:
            if not self._keeps_standing(task, taken):
                continue
            chosen.append(task)
            taken[task.queue] = taken.get(task.queue, 0) + task.demand
            room = room + task.demand
            if (room >= self._need).all():
                return NodeChoice(node, *self._trimmed(chosen, room))
        if candidates:
            self._why[_NO_FIT] += 1
        return None

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
        if self.victim_floor and self._queue_share(queue) <= standing.target + EPSILON:
            return Blocked.AT_TARGET
        return None

    def _queue_share(self, queue: str) -> float:
        found = self._shares.get(queue)
        if found is None:
            found = self._shares[queue] = self.share(self.standings[queue].usage)
        return found

    def _keeps_standing(self, task: RunningTask, taken: dict[str, np.ndarray]) -> bool:
        standing = self.standings[task.queue]
        after = self.share(standing.usage - taken.get(task.queue, 0) - task.demand)
        if self.victim_floor and after < standing.target - EPSILON:
            return self._count(Blocked.AT_TARGET)
        if self.final_share_rule and self._preemptor_after > _normalized(after, standing.guarantee) + EPSILON:
            return self._count(Blocked.FINAL_SHARE)
        return True

    def _order(self, task: RunningTask) -> tuple[float, float, float, str]:
        over = self._queue_share(task.queue) - self.standings[task.queue].target
        return (-over, -task.started_at, self._lost(task), task.task_id)

    def _lost(self, task: RunningTask) -> float:
        share = self._demand_shares.get(task.job_id)
        if share is None:       # a job's tasks all ask the same
            share = self._demand_shares[task.job_id] = self.share(task.demand)
        return max(self.now - task.started_at, 0.0) * share

    def _trimmed(self, chosen: list[RunningTask], room: np.ndarray) -> tuple[tuple[RunningTask, ...], float]:
        """Kueue's reverse walk: drop each victim, last chosen first, whose room is not needed."""
        kept = list(chosen)
        for task in reversed(chosen[:-1]):
            if (room - task.demand >= self._need).all():
                kept.remove(task)
                room = room - task.demand
        return tuple(kept), sum(self._lost(t) for t in kept)

    def _count(self, why: Blocked) -> bool:
        self._why[_REASONS.index(why)] += 1
        return False


def _normalized(share: float, guarantee: float) -> float:
    """A share against what the queue is guaranteed: equal standing is equal normalized share."""
    return share / guarantee if guarantee > 0 else float("inf")


def cheapest(choices: Sequence[NodeChoice]) -> NodeChoice | None:
    """The node whose victims lose the least work, then the fewest victims, then by name."""
    return min(choices, key=lambda c: (c.lost_work, len(c.victims), c.node), default=None)
