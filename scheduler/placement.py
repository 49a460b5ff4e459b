"""The placement seam: which node gets a task. Pure: a request and read-only node views
in, a node name (or None) out; randomness comes in as a seeded `random.Random`."""

from __future__ import annotations

import random
from typing import Callable, Protocol, Sequence

from tcluster.errors import InvalidArgument
from tcluster.resources import Resources
from tcluster.scheduler.views import NodeView


class PlacementPolicy(Protocol):
    name: str

    def place(self, request: Resources, nodes: Sequence[NodeView], rng: random.Random) -> str | None:
        """A node whose free resources hold `request`, or None. `nodes` are READY nodes
        in a stable order (by name)."""


class FirstFit:
    """The first node, in a stable order, where the task fits."""

    name = "first-fit"

    def place(self, request: Resources, nodes: Sequence[NodeView], rng: random.Random) -> str | None:
        for node in nodes:
            if request.fits_in(node.free):
                return node.name
        return None


PLACEMENT_POLICIES: dict[str, Callable[[], PlacementPolicy]] = {
    "first-fit": FirstFit,
}


def make_placement(name: str) -> PlacementPolicy:
    try:
        return PLACEMENT_POLICIES[name]()
    except KeyError:
        allowed = ", ".join(sorted(PLACEMENT_POLICIES))
        raise InvalidArgument("placement", f"unknown policy {name!r}; choose one of: {allowed}") from None
