"""Plain-Python loop versions of the placement policies: the same decisions, one node
at a time. They are the executable specification the vectorized policies are tested
against, and the baseline `bench/placement.py` compares with. `place` runs a real
policy over a short list of plain NodeViews, for tests that name their nodes."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

from tcluster.domain.resources import Resources
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import PlacementPolicy
from tcluster.scheduler.policybase import EPSILON

Row = Sequence[float]


def _fits(request: Row, free: Row) -> bool:
    return all(amount <= 0 or have >= amount - EPSILON for amount, have in zip(request, free))


def _dominant(request: Row, scale: Row) -> int:
    shares = [amount / s for amount, s in zip(request, scale)]
    return shares.index(max(shares))


def _best(rows: list[int], score: Callable[[int], float], lowest: bool) -> int | None:
    best_row, best_score = None, 0.0
    for row in rows:
        value = score(row)
        if best_row is None or (value < best_score if lowest else value > best_score):
            best_row, best_score = row, value
    return best_row


def reference_choose(policy: str, request: Row, free: Sequence[Row], scale: Row, eligible: Sequence[bool],
                     rng: random.Random) -> int | None:
    """`free` rows in name order; `eligible` already includes schedulability."""
    rows = [i for i in range(len(free)) if eligible[i] and _fits(request, free[i])]
    if not rows:
        return None
    if policy == "first-fit":
        return rows[0]
    if policy == "random-fit":
        return rows[rng.randrange(len(rows))]
    if policy in ("best-fit", "worst-fit"):
        kind = _dominant(request, scale)
        return _best(rows, lambda i: free[i][kind] - request[kind], lowest=policy == "best-fit")
    if policy in ("anbf", "lotes"):   # lotes without a plan decides as anbf
        def distance(i: int) -> float:
            total = 0.0
            for kind, amount in enumerate(request):
                gap = free[i][kind] / scale[kind] - amount / scale[kind]
                total += gap * gap
            return total
        return _best(rows, distance, lowest=True)
    if policy == "tetris":
        def alignment(i: int) -> float:
            total = 0.0
            for kind, amount in enumerate(request):
                total += (free[i][kind] / scale[kind]) * (amount / scale[kind])
            return total
        return _best(rows, alignment, lowest=False)
    raise ValueError(f"no reference for {policy!r}")


@dataclass(frozen=True)
class NodeView:
    name: str
    capacity: Resources
    free: Resources
    labels: tuple[tuple[str, str], ...] = ()


def place(policy: PlacementPolicy, request: Resources, nodes: Sequence[NodeView], rng: random.Random) -> str | None:
    """The policy's decision over a list of node views, through a matrix built from them."""
    matrix = NodeMatrix()
    for node in nodes:
        matrix.upsert(node.name, node.capacity, dict(node.labels))
        matrix.allocate(node.name, node.capacity - node.free)
    view = matrix.view()
    vector = view.request_vector(request)
    row = None if vector is None else policy.choose(vector, view, None, rng)
    return None if row is None else matrix.names[row]
