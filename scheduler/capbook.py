"""What the queue quotas allow now (scheduler/quotas.py has the keys and their meaning).

A CapBook is built per round from what runs (one Holding per leaf queue, user and task
shape) and the READY capacity; `blocks` answers "may `count` more tasks of this shape
start in this queue for this user" with None or the reason that names the cap, and `add`
counts a start the round (or the preemption planner) decided. Running work is never
judged: a cap lowered by a reload stops new starts only (as Slurm and Kueue do).

Pure and cheap: a tree without quotas makes no book (`make_capbook` returns None); with
them, a check walks only the capped queues above the job's (a handful)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from tcluster.domain.resources import CPU, MEMORY, Resources
from tcluster.domain.units import format_bytes, format_cpu
from tcluster.scheduler.nodestate import resource_vector
from tcluster.scheduler.queues import QueueTree
from tcluster.scheduler.quotas import QueueCaps

EPSILON = 1e-9


@dataclass(frozen=True)
class Holding:
    """`running` tasks of one shape that `user` runs in leaf `queue`."""
    queue: str
    user: str
    demand: Resources      # one task
    running: int


def has_caps(tree: QueueTree | None) -> bool:
    """Whether any queue sets a quota the round enforces (max_pending_per_user is the submit's)."""
    if tree is None:
        return False
    return any(_enforced(node.caps) for node in tree.walk())


def _enforced(caps: QueueCaps) -> bool:
    return any(v is not None for v in (caps.max, caps.borrow_limit, caps.lend_limit, caps.max_running_per_user))


def make_capbook(tree: QueueTree | None, holdings: Iterable[Holding], capacity: Resources) -> CapBook | None:
    return CapBook(tree, holdings, capacity) if tree is not None and has_caps(tree) else None


def _amount(kind: str, value: float) -> str:
    if kind == MEMORY:
        return format_bytes(value)
    if kind == CPU:
        return format_cpu(value)
    return f"{value:g}"


class CapBook:
    """Per-kind amounts are plain lists in `kinds` order (cpu, memory first): a check is a
    few float compares per capped queue above the job (numpy costs more on 2-4 numbers)."""

    def __init__(self, tree: QueueTree, holdings: Iterable[Holding], capacity: Resources) -> None:
        self.tree = tree
        capped = {n.path: n.caps for n in tree.walk() if n.path and _enforced(n.caps)}
        extra = sorted({k for c in capped.values() if c.max is not None for k, _ in c.max} -
                       set(capacity.as_dict()))
        self.kinds = tuple(capacity.as_dict()) + tuple(extra)    # cpu, memory first (resource_vector's order)
        self.capacity = self.vector(capacity)
        self.caps = capped
        self.usage = {path: [0.0] * len(self.kinds) for path in capped}
        self.user_running: dict[tuple[str, str], int] = {}
        self.total = [0.0] * len(self.kinds)
        self.lenders = [p for p, c in capped.items() if c.lend_limit is not None]
        self._chains: dict[str, tuple[str, ...]] = {}
        self._vectors: dict[Resources, list[float]] = {}
        self._max = {path: self._max_list(c.max) for path, c in capped.items() if c.max is not None}
        self._ceiling = {path: [(tree.guaranteed_share(path) + c.borrow_limit) * cap for cap in self.capacity]
                         for path, c in capped.items() if c.borrow_limit is not None}
        for held in holdings:
            if held.running > 0:
                self.add(held.queue, held.user, held.demand, held.running)

    def vector(self, resources: Resources) -> list[float]:
        values: list[float] = resource_vector(resources, self.kinds).tolist()
        return values

    def _vector(self, resources: Resources) -> list[float]:
        found = self._vectors.get(resources)
        if found is None:
            found = self._vectors[resources] = self.vector(resources)
        return found

    def _max_list(self, amounts: tuple[tuple[str, float], ...]) -> list[float]:
        """The queue's max per kind; kinds it does not name: unlimited."""
        limit = [math.inf] * len(self.kinds)
        for kind, amount in amounts:
            limit[self.kinds.index(kind)] = amount
        return limit

    def chain(self, queue: str) -> tuple[str, ...]:
        """The capped queues from `queue` up to the top (a queue not in the tree: none)."""
        found = self._chains.get(queue)
        if found is None:
            up: list[str] = []
            path: str | None = queue if self.tree.node(queue) is not None else None
            while path:
                if path in self.caps:
                    up.append(path)
                path = self.tree.parent(path)
            found = self._chains[queue] = tuple(up)
        return found

    def add(self, queue: str, user: str, demand: Resources, count: int = 1) -> None:
        """Counts `count` started tasks (or claimed room) of `user` in `queue`."""
        need = self._vector(demand)
        kinds = range(len(need))
        for k in kinds:
            self.total[k] += need[k] * count
        for path in self.chain(queue):
            used = self.usage[path]
            for k in kinds:
                used[k] += need[k] * count
            if self.caps[path].max_running_per_user is not None:
                self.user_running[(path, user)] = self.user_running.get((path, user), 0) + count

    def blocks(self, queue: str, user: str, demand: Resources, count: int = 1) -> str | None:
        """None if `count` more tasks may start; else the cap that holds them, in words."""
        one = self._vector(demand)
        need = [amount * count for amount in one] if count != 1 else one
        for path in self.chain(queue):
            reason = self._queue_cap(path, user, need, count)
            if reason is not None:
                return reason
        return self._lent_room(queue, np.array(need)) if self.lenders else None

    def _queue_cap(self, path: str, user: str, need: list[float], count: int) -> str | None:
        used = self.usage[path]
        limit = self._max.get(path)
        if limit is not None:
            over = _first_over(used, need, limit)
            if over is not None:
                kind = self.kinds[over]
                never = "; the job's tasks together ask for more: it can never start" \
                    if need[over] > limit[over] + EPSILON else ""
                return f"queue {path} at max {kind} {_amount(kind, limit[over])}{never}"
        ceiling = self._ceiling.get(path)
        if ceiling is not None:
            over = _first_over(used, need, ceiling)
            if over is not None:
                return self._borrow_reason(path, self.kinds[over], used[over], ceiling[over])
        limit_running = self.caps[path].max_running_per_user
        if limit_running is not None and self.user_running.get((path, user), 0) + count > limit_running:
            return f"user {user} at max_running_per_user {limit_running} in queue {path}"
        return None

    def _borrow_reason(self, path: str, kind: str, used: float, ceiling: float) -> str:
        borrow = self.caps[path].borrow_limit
        assert borrow is not None
        return (f"queue {path} at borrow_limit {borrow:g}: {kind} {_amount(kind, used)} held of "
                f"{_amount(kind, ceiling)} (guarantee {self.tree.guaranteed_share(path):.2f} + {borrow:g} "
                f"of the cluster)")

    def _kept(self, path: str) -> np.ndarray:
        """What queue `path` keeps for its own subtree and does not use: the unlent part
        of its quota (guarantee - lend_limit), less what it holds."""
        caps = self.caps[path]
        assert caps.lend_limit is not None
        share = max(self.tree.guaranteed_share(path) - caps.lend_limit, 0.0)
        kept: np.ndarray = np.maximum(share * np.array(self.capacity) - np.array(self.usage[path]), 0.0)
        return kept

    def _lent_room(self, queue: str, need: np.ndarray) -> str | None:
        """A start in `queue` must leave the unused kept room of every lender outside
        `queue`'s line free. Nested lenders: the outer one's keep covers the inner ones'."""
        inside = set(self.chain(queue))
        outside = [p for p in self.lenders if p not in inside]
        kept = {p: self._kept(p) for p in outside}
        outer = [p for p in outside if not any(p.startswith(o + ".") for o in outside)]
        protected = np.zeros(len(self.kinds))
        for path in outer:
            inner = sum((kept[p] for p in outside if p.startswith(path + ".")), np.zeros(len(self.kinds)))
            protected = protected + np.maximum(kept[path], inner)
        capacity = np.array(self.capacity)
        after = np.array(self.total) + need
        # Only the kept room stands in the way (a start that does not fit at all is the nodes' to explain).
        over = (need > 0) & (after > capacity - protected + EPSILON) & (after <= capacity + EPSILON)
        if not over.any():
            return None
        k = int(np.flatnonzero(over)[0])
        lender = max(outer, key=lambda p: (float(kept[p][k]), p))
        lend = self.caps[lender].lend_limit
        return (f"queue {queue} may not borrow the room queue {lender} keeps for itself (lend_limit {lend:g}): "
                f"{_amount(self.kinds[k], float(protected[k]))} {self.kinds[k]} kept unused")


def _first_over(used: list[float], need: list[float], limit: list[float]) -> int | None:
    """The first kind the task needs (> 0) of which used + need would pass the limit."""
    for k, amount in enumerate(need):
        if amount > 0 and used[k] + amount > limit[k] + EPSILON:
            return k
    return None
