"""What the queue quotas allow now (scheduler/quotas.py has the keys and their meaning).

A CapBook is built per round from what runs (one Holding per leaf queue, user and task
shape) and the READY capacity; `blocks` answers "may `count` more tasks of this shape
start in this queue for this user" with None or the reason that names the cap, and `add`
counts a start the round (or the preemption planner) decided. Running work is never
judged: a cap lowered by a reload stops new starts only (as Slurm and Kueue do).

Pure and cheap: a tree without quotas makes no book (`make_capbook` returns None); with
them, a check walks only the capped queues above the job's (a handful)."""

from __future__ import annotations

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
    def __init__(self, tree: QueueTree, holdings: Iterable[Holding], capacity: Resources) -> None:
        self.tree = tree
        capped = {n.path: n.caps for n in tree.walk() if n.path and _enforced(n.caps)}
        extra = sorted({k for c in capped.values() if c.max is not None for k, _ in c.max} -
                       set(capacity.as_dict()))
        self.kinds = tuple(capacity.as_dict()) + tuple(extra)    # cpu, memory first (resource_vector's order)
        self.capacity = self.vector(capacity)
        self.caps = capped
        self.usage = {path: np.zeros(len(self.kinds)) for path in capped}
        self.user_running: dict[tuple[str, str], int] = {}
        self.total = np.zeros(len(self.kinds))
        self.lenders = [p for p, c in capped.items() if c.lend_limit is not None]
        self._chains: dict[str, tuple[str, ...]] = {}
        self._vectors: dict[Resources, np.ndarray] = {}
        self._maxes: dict[str, np.ndarray] = {}
        for held in holdings:
            if held.running > 0:
                self.add(held.queue, held.user, held.demand, held.running)

    def vector(self, resources: Resources) -> np.ndarray:
        return resource_vector(resources, self.kinds)

    def _vector(self, resources: Resources) -> np.ndarray:
        found = self._vectors.get(resources)
        if found is None:
            found = self._vectors[resources] = self.vector(resources)
        return found

    def _max_vector(self, path: str, amounts: tuple[tuple[str, float], ...]) -> np.ndarray:
        """The queue's max per kind; kinds it does not name: unlimited."""
        found = self._maxes.get(path)
        if found is None:
            found = np.full(len(self.kinds), np.inf)
            for kind, amount in amounts:
                found[self.kinds.index(kind)] = amount
            self._maxes[path] = found
        return found

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
        need = self._vector(demand) * count
        self.total = self.total + need
        for path in self.chain(queue):
            self.usage[path] = self.usage[path] + need
            if self.caps[path].max_running_per_user is not None:
                self.user_running[(path, user)] = self.user_running.get((path, user), 0) + count

    def blocks(self, queue: str, user: str, demand: Resources, count: int = 1) -> str | None:
        """None if `count` more tasks may start; else the cap that holds them, in words."""
        need = self._vector(demand) * count
        for path in self.chain(queue):
            reason = self._queue_cap(path, user, need, count)
            if reason is not None:
                return reason
        return self._lent_room(queue, need) if self.lenders else None

    def _queue_cap(self, path: str, user: str, need: np.ndarray, count: int) -> str | None:
        caps, used = self.caps[path], self.usage[path]
        if caps.max is not None:
            limit = self._max_vector(path, caps.max)
            over = used + need > limit + EPSILON
            if over.any():
                k = int(np.flatnonzero(over)[0])
                kind = self.kinds[k]
                never = "; the job's tasks together ask for more: it can never start" \
                    if need[k] > limit[k] + EPSILON else ""
                return f"queue {path} at max {kind} {_amount(kind, limit[k])}{never}"
        if caps.borrow_limit is not None:
            guarantee = self.tree.guaranteed_share(path)
            ceiling = (guarantee + caps.borrow_limit) * self.capacity
            over = (need > 0) & (used + need > ceiling + EPSILON)
            if over.any():
                kind = self.kinds[int(np.flatnonzero(over)[0])]
                k = self.kinds.index(kind)
                return (f"queue {path} at borrow_limit {caps.borrow_limit:g}: {kind} {_amount(kind, used[k])} "
                        f"held of {_amount(kind, ceiling[k])} (guarantee {guarantee:.2f} + {caps.borrow_limit:g} "
                        f"of the cluster)")
        limit_running = caps.max_running_per_user
        if limit_running is not None and self.user_running.get((path, user), 0) + count > limit_running:
            return f"user {user} at max_running_per_user {limit_running} in queue {path}"
        return None

    def _kept(self, path: str) -> np.ndarray:
        """What queue `path` keeps for its own subtree and does not use: the unlent part
        of its quota (guarantee - lend_limit), less what it holds."""
        caps = self.caps[path]
        assert caps.lend_limit is not None
        share = max(self.tree.guaranteed_share(path) - caps.lend_limit, 0.0)
        kept: np.ndarray = np.maximum(share * self.capacity - self.usage[path], 0.0)
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
        after = self.total + need
        # Only the kept room stands in the way (a start that does not fit at all is the nodes' to explain).
        over = (need > 0) & (after > self.capacity - protected + EPSILON) & (after <= self.capacity + EPSILON)
        if not over.any():
            return None
        k = int(np.flatnonzero(over)[0])
        lender = max(outer, key=lambda p: (float(kept[p][k]), p))
        lend = self.caps[lender].lend_limit
        return (f"queue {queue} may not borrow the room queue {lender} keeps for itself (lend_limit {lend:g}): "
                f"{_amount(self.kinds[k], float(protected[k]))} {self.kinds[k]} kept unused")

