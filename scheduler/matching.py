"""Constraints over all nodes at once: packed per-label bit vectors combined with
AND/OR/NOT, as Megha does (section IV-B): O(constraints x nodes / 64) word operations."""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable

import numpy as np

from tcluster.domain.ceilings import allows
from tcluster.domain.constraints import Constraint
from tcluster.scheduler.nodestate import NodeMatrix, unpack_bits


def constraint_mask(constraint: Constraint, nodes: NodeMatrix) -> np.ndarray:
    """Packed bits of the nodes where `constraint` holds."""
    if constraint.op in ("has", "nothas"):
        bits = nodes.label_mask(constraint.key, None)
    else:
        bits = np.zeros_like(nodes.all_mask())
        for value in constraint.values:
            bits = bits | nodes.label_mask(constraint.key, value)
    if constraint.op in ("ne", "notin", "nothas"):
        bits = ~bits & nodes.all_mask()
    return bits


def match_mask(constraints: Iterable[Constraint], nodes: NodeMatrix) -> np.ndarray:
    """Packed bits of the nodes where every constraint holds."""
    bits = nodes.all_mask()
    for constraint in constraints:
        bits = bits & constraint_mask(constraint, nodes)
    return bits


def ceiling_mask(asks: dict[str, int], nodes: NodeMatrix) -> np.ndarray | None:
    """Rows whose ceilings allow the job's pids/log limits (tcluster/domain/ceilings.py); None
    when the job asks none (every node allows it). A Python pass over the rows: only jobs
    that set such limits pay it."""
    if not asks:
        return None
    n = len(nodes.names)
    return np.fromiter((allows(c, asks) for c in nodes.ceilings[:n]), dtype=bool, count=n)


def first_unmatched(constraints: Iterable[Constraint], nodes: NodeMatrix) -> Constraint | None:
    """The first constraint that no node satisfies on its own, for pending reasons."""
    for constraint in constraints:
        if not constraint_mask(constraint, nodes).any():
            return constraint
    return None


class EligibleCache:
    """Bool masks per constraint set, recomputed only when nodes or labels change; the
    least recently used sets are dropped beyond `size` (a mask is a byte per node)."""

    def __init__(self, size: int = 1024) -> None:
        self._generation = -1
        self._size = size
        self._masks: OrderedDict[tuple[Constraint, ...], np.ndarray] = OrderedDict()

    def eligible(self, constraints: tuple[Constraint, ...], nodes: NodeMatrix) -> np.ndarray | None:
        """None when there are no constraints (every node is eligible)."""
        if not constraints:
            return None
        if nodes.generation != self._generation:
            self._masks.clear()
            self._generation = nodes.generation
        mask = self._masks.get(constraints)
        if mask is None:
            mask = self._masks[constraints] = unpack_bits(match_mask(constraints, nodes), len(nodes.names))
            if len(self._masks) > self._size:
                self._masks.popitem(last=False)
        else:
            self._masks.move_to_end(constraints)
        return mask
