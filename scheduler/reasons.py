"""Why a task waits: a human sentence built from the request and the node views."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tcluster.domain.constraints import Constraint
from tcluster.domain.resources import CPU, MEMORY, Resources
from tcluster.scheduler.matching import first_unmatched
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.domain.units import format_bytes, format_cpu


WAITING_FOR_NEXT_ROUND = "waiting for the next scheduling round"


def _amount(kind: str, value: float) -> str:
    if kind == MEMORY:
        return format_bytes(value)
    if kind == CPU:
        return format_cpu(value)
    return f"{value:g}"


def never_fits_reason(request: Resources, capacities: Sequence[tuple[str, Resources]]) -> str | None:
    """If no node could ever hold `request`, say which resource and the largest amount."""
    if not capacities or any(request.fits_in(cap) for _, cap in capacities):
        return None
    for kind in request.shortfall(Resources.of({})):
        if all(kind in request.shortfall(cap) for _, cap in capacities):
            name, largest = max(capacities, key=lambda item: (item[1].get(kind), item[0]))
            return (
                f"resources.{kind}: each task asks for {_amount(kind, request.get(kind))} but the largest "
                f"node ({name}) has {_amount(kind, largest.get(kind))}; no node can ever run it"
            )
    return "resources: no single node has all of the requested resources together; no node can ever run it"


def unplaceable_reason(request: Resources, constraints: tuple[Constraint, ...], nodes: NodeMatrix,
                       eligible: np.ndarray | None) -> str:
    """Why no node takes the task now: a constraint no node meets, no ready node among
    those that match, or the scarcest resource among the ones that do."""
    view = nodes.view()
    if constraints:
        unmatched = first_unmatched(constraints, nodes)
        if unmatched is not None:
            return f"no node matches constraint '{unmatched}'"
        assert eligible is not None
        if not eligible.any():
            return "no node matches all constraints together: " + ", ".join(f"'{c}'" for c in constraints)
    usable = view.schedulable if eligible is None else view.schedulable & eligible
    if not usable.any():
        if not constraints:
            return "no nodes are ready"
        return "no ready node matches the constraints: " + ", ".join(f"'{c}'" for c in constraints)
    reason = _scarcest(request, view.kinds, view.free_by_kind, view.names, usable)
    return f"{reason} (among nodes matching the constraints)" if constraints else reason


def _scarcest(request: Resources, kinds: Sequence[str], free_by_kind: np.ndarray, names: Sequence[str | None],
              usable: np.ndarray) -> str:
    """Names the scarcest resource (the kind the fewest usable nodes have enough of now)
    and the node with the most of it."""
    short_counts = {}
    for k, kind in enumerate(kinds):
        amount = request.get(kind)
        if amount > 0:
            short_counts[kind] = int((usable & (free_by_kind[k] < amount - 1e-9)).sum())
    missing = [kind for kind, amount in request.as_dict().items() if amount > 0 and kind not in kinds]
    if missing:
        return f"no node has any {missing[0]}"
    if not any(short_counts.values()):
        return WAITING_FOR_NEXT_ROUND
    kind = max(sorted(short_counts), key=lambda k: short_counts[k])
    column = free_by_kind[list(kinds).index(kind)]
    best = int(np.where(usable, column, -np.inf).argmax())
    return (
        f"no node has enough {kind} right now: each task needs {_amount(kind, request.get(kind))}, "
        f"the most free is {_amount(kind, float(column[best]))} on {names[best]}"
    )
