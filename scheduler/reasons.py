"""Why a task waits: a human sentence built from the request and the node views."""

from __future__ import annotations

from typing import Sequence

from tcluster.resources import CPU, MEMORY, Resources
from tcluster.scheduler.views import NodeView
from tcluster.units import format_bytes, format_cpu


def _amount(kind: str, value: float) -> str:
    if kind == MEMORY:
        return format_bytes(value)
    if kind == CPU:
        return format_cpu(value)
    return f"{value:g}"


def pending_reason(request: Resources, nodes: Sequence[NodeView]) -> str:
    """Names the scarcest resource: the kind that the fewest nodes have enough of now."""
    if not nodes:
        return "no nodes are ready"
    short_by_kind: dict[str, int] = {}
    for node in nodes:
        for kind in request.shortfall(node.free):
            short_by_kind[kind] = short_by_kind.get(kind, 0) + 1
    if not short_by_kind:
        return "waiting for the next scheduling round"
    kind = max(sorted(short_by_kind), key=lambda k: short_by_kind[k])
    best = max(nodes, key=lambda n: (n.free.get(kind), n.name))
    return (
        f"no node has enough {kind} right now: each task needs {_amount(kind, request.get(kind))}, "
        f"the most free is {_amount(kind, best.free.get(kind))} on {best.name}"
    )


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
