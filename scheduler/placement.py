"""The placement seam: which node gets a task.

Pure and vectorized: a request vector and a read-only NodeMatrixView in, a row index
(or None) out; no Python loop over nodes. Randomness comes in as a seeded
`random.Random`. Ties go to the lowest row, and rows are sorted by node name, so every
decision is deterministic. Scores normalize each resource by the largest capacity of
that kind in the cluster, so heterogeneous nodes compare on one scale.

Each policy also has `place(request, nodes, rng)` over plain NodeViews for small
callers; it builds a matrix and runs the same vectorized code."""

from __future__ import annotations

import random
from typing import Callable, Protocol, Sequence

import numpy as np

from tcluster.errors import InvalidArgument
from tcluster.resources import Resources
from tcluster.scheduler.nodestate import NodeMatrix, NodeMatrixView
from tcluster.scheduler.views import NodeView

EPSILON = 1e-9   # the same slack as Resources.fits_in


class PlacementPolicy(Protocol):
    name: str

    def choose(self, request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None,
               rng: random.Random) -> int | None:
        """A row whose free resources hold `request`, among `eligible` (bool per row;
        None: all) schedulable rows; None if there is none."""

    def place(self, request: Resources, nodes: Sequence[NodeView], rng: random.Random) -> str | None:
        """The same decision over a list of node views."""


def fit_mask(request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None) -> np.ndarray:
    ok = view.schedulable.copy() if eligible is None else np.logical_and(eligible, view.schedulable)
    for kind, amount in enumerate(request.tolist()):
        if amount > 0:  # a kind the task does not ask for never blocks it
            ok &= view.free_by_kind[kind] >= amount - EPSILON
    return ok


def _first(ok: np.ndarray) -> int | None:
    i = int(ok.argmax())
    return i if ok[i] else None


class _Policy:
    name = ""

    def choose(self, request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None,
               rng: random.Random) -> int | None:
        ok = fit_mask(request, view, eligible)
        if not ok.any():
            return None
        return self._pick(request, view, ok, rng)

    def _pick(self, request: np.ndarray, view: NodeMatrixView, ok: np.ndarray, rng: random.Random) -> int | None:
        raise NotImplementedError

    def place(self, request: Resources, nodes: Sequence[NodeView], rng: random.Random) -> str | None:
        matrix = NodeMatrix()
        for node in nodes:
            matrix.upsert(node.name, node.capacity, dict(node.labels))
            matrix.allocate(node.name, node.capacity - node.free)
        view = matrix.view()
        vector = view.request_vector(request)
        row = None if vector is None else self.choose(vector, view, None, rng)
        return None if row is None else view.names[row]


class FirstFit(_Policy):
    """The first node in name order where the task fits."""
    name = "first-fit"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, ok: np.ndarray, rng: random.Random) -> int | None:
        return _first(ok)


class RandomFit(_Policy):
    """A uniformly random node where the task fits."""
    name = "random-fit"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, ok: np.ndarray, rng: random.Random) -> int | None:
        rows = np.flatnonzero(ok)
        return int(rows[rng.randrange(len(rows))])


def dominant_kind(request: np.ndarray, view: NodeMatrixView) -> int:
    return int(np.argmax(request / view.scale))


class BestFit(_Policy):
    """The node left with the least of the task's dominant resource."""
    name = "best-fit"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, ok: np.ndarray, rng: random.Random) -> int | None:
        kind = dominant_kind(request, view)
        left = view.free_by_kind[kind] - request[kind]
        return int(np.where(ok, left, np.inf).argmin())


class WorstFit(_Policy):
    """Spreads: the node left with the most of the task's dominant resource."""
    name = "worst-fit"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, ok: np.ndarray, rng: random.Random) -> int | None:
        kind = dominant_kind(request, view)
        left = view.free_by_kind[kind] - request[kind]
        return int(np.where(ok, left, -np.inf).argmax())


class AffinityNumberBestFit(_Policy):
    """TCluster's ANBF (section 4.2): the minimum Euclidean distance between the
    normalized request and the node's normalized free resources."""
    name = "anbf"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, ok: np.ndarray, rng: random.Random) -> int | None:
        distance = np.zeros(len(ok))
        for kind, amount in enumerate(request.tolist()):
            gap = (view.free_by_kind[kind] - amount) / view.scale[kind]
            distance += gap * gap
        return int(np.where(ok, distance, np.inf).argmin())


class Tetris(_Policy):
    """Tetris (Grandl et al., SIGCOMM 2014): the largest dot product of the normalized
    request and free vectors, i.e. the best-aligned node."""
    name = "tetris"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, ok: np.ndarray, rng: random.Random) -> int | None:
        score = np.zeros(len(ok))
        for kind, amount in enumerate(request.tolist()):
            score += (amount / view.scale[kind]) * (view.free_by_kind[kind] / view.scale[kind])
        return int(np.where(ok, score, -np.inf).argmax())


PLACEMENT_POLICIES: dict[str, Callable[[], PlacementPolicy]] = {
    policy.name: policy
    for policy in (AffinityNumberBestFit, FirstFit, RandomFit, BestFit, WorstFit, Tetris)
}
DEFAULT_PLACEMENT = AffinityNumberBestFit.name


def make_placement(name: str) -> PlacementPolicy:
    try:
        return PLACEMENT_POLICIES[name]()
    except KeyError:
        allowed = ", ".join(sorted(PLACEMENT_POLICIES))
        raise InvalidArgument("placement", f"unknown policy {name!r}; choose one of: {allowed}") from None
