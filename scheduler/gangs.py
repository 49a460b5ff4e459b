"""Gangs (`tcl submit --gang`): all of a job's waiting tasks are placed in one round, or
none is. Within the round's tentative allocations: each task is placed as any other; if
one finds no node, those already placed for the gang are released again, so the round
goes on as if the gang had not been tried.

A gang that cannot start takes a hold as a big task does (scheduler/reservations.py,
after reserve_after_s): the nodes it would fit on when empty are held for it, so the room
grows there. At most one gang holds at a time: two gangs never each hold half of what
both need."""

from __future__ import annotations

import random

import numpy as np

from tcluster.domain.resources import Resources
from tcluster.scheduler.nodestate import NodeMatrix, NodeMatrixView
from tcluster.scheduler.placement import PlacementPolicy

EPSILON = 1e-9


def place_gang(size: int, resources: Resources, request: np.ndarray, view: NodeMatrixView,
               eligible: np.ndarray | None, placement: PlacementPolicy, nodes: NodeMatrix,
               rng: random.Random) -> list[int] | None:
    """Rows for all `size` tasks (allocated in `nodes`), or None and nothing allocated."""
    rows: list[int] = []
    for _ in range(size):
        row = placement.choose(request, view, eligible, rng)
        if row is None:
            break
        nodes.allocate(view.names[row], resources)   # type: ignore[arg-type]
        rows.append(row)
    if len(rows) == size:
        return rows
    for row in rows:
        nodes.release(view.names[row], resources)   # type: ignore[arg-type]
    unchoose = getattr(placement, "unchoose", None)   # a policy that keeps the round's choices (anbf, lotes)
    if unchoose is not None and rows:
        unchoose(rows, request)
    return None


def gang_rows(size: int, request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None,
              taken: set[str]) -> list[str]:
    """Nodes that could hold the whole gang once empty, fewest first (the largest room
    first, then the least short); [] if all of them together could not."""
    ok = view.schedulable.copy() if eligible is None else np.logical_and(eligible, view.schedulable)
    fits = np.floor(np.min(np.where(request > 0, view.capacity / np.maximum(request, EPSILON), np.inf), axis=1)
                    + EPSILON)
    fits = np.where(np.isfinite(fits), fits, size)
    short = (np.maximum(request[None, :] - view.free, 0.0) / view.scale[None, :]).sum(axis=1)
    order = sorted((int(r) for r in np.flatnonzero(ok & (fits >= 1))
                    if view.names[int(r)] not in taken), key=lambda r: (-fits[r], short[r], int(view.rank[r])))
    chosen, room = [], 0
    for row in order:
        chosen.append(str(view.names[row]))
        room += int(fits[row])
        if room >= size:
            return chosen
    return []
