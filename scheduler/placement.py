"""The placement seam: which node gets a task.

Pure and vectorized: a request vector and a read-only NodeMatrixView in, a row index
(or None) out; no Python loop over nodes. Randomness comes in as a seeded
`random.Random`. Ties go to the first node in name order (`view.order`), so every
decision is deterministic. Scores normalize each resource by the largest capacity of
that kind in the cluster, so heterogeneous nodes compare on one scale."""

from __future__ import annotations

import random
from typing import Callable, Iterator, Protocol

import numpy as np

from tcluster.domain.errors import InvalidArgument
from tcluster.scheduler.anbf import AffinityNumberBestFit
from tcluster.scheduler.lotes.policy import LotesPlacement
from tcluster.scheduler.nodestate import NodeMatrixView
from tcluster.scheduler.policybase import Policy, Scratch, first_in_order, highest_score, lowest_score, sum_rows


class PlacementPolicy(Protocol):
    name: str

    def choose(self, request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None,
               rng: random.Random) -> int | None:
        """A row whose free resources hold `request`, among `eligible` (bool per row;
        None: all) schedulable rows; None if there is none."""

    def choose_each(self, request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None,
                    rng: random.Random) -> Iterator[int | None]:
        """The rows for the tasks of one job, one per next(), ending after a None. Between
        two next() the caller allocates the row it got in the matrix behind `view`, and
        nothing else: the decisions are then exactly choose()'s, one call per task."""


class FirstFit(Policy):
    """The first node in name order where the task fits."""
    name = "first-fit"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: Scratch, rng: random.Random) -> int | None:
        return first_in_order(s.ok, view.order)


class RandomFit(Policy):
    """A uniformly random node where the task fits."""
    name = "random-fit"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: Scratch, rng: random.Random) -> int | None:
        rows = view.order[s.ok[view.order]]   # fitting rows in name order
        return int(rows[rng.randrange(len(rows))]) if len(rows) else None


def dominant_kind(request: np.ndarray, view: NodeMatrixView) -> int:
    return int(np.argmax(request / view.scale))


class BestFit(Policy):
    """The node left with the least of the task's dominant resource."""
    name = "best-fit"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: Scratch, rng: random.Random) -> int | None:
        kind = dominant_kind(request, view)
        np.subtract(view.free_by_kind[kind], request[kind], out=s.score)
        return lowest_score(s, view.rank)


class WorstFit(Policy):
    """Spreads: the node left with the most of the task's dominant resource."""
    name = "worst-fit"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: Scratch, rng: random.Random) -> int | None:
        kind = dominant_kind(request, view)
        np.subtract(view.free_by_kind[kind], request[kind], out=s.score)
        return highest_score(s, view.rank)


class Tetris(Policy):
    """Tetris (Grandl et al., SIGCOMM 2014): the largest dot product of the normalized
    request and free vectors, i.e. the best-aligned node."""
    name = "tetris"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: Scratch, rng: random.Random) -> int | None:
        terms = s.kinds(len(request))
        np.multiply(view.normalized_free_by_kind, (request / view.scale)[:, None], out=terms)
        sum_rows(terms, s.score)
        return highest_score(s, view.rank)


PLACEMENT_POLICIES: dict[str, Callable[[], PlacementPolicy]] = {
    **{policy.name: policy for policy in (AffinityNumberBestFit, FirstFit, RandomFit, BestFit, WorstFit, Tetris)},
    LotesPlacement.name: LotesPlacement,    # LoTES bin targets (scheduler/lotes)
}
DEFAULT_PLACEMENT = AffinityNumberBestFit.name


def make_placement(name: str) -> PlacementPolicy:
    try:
        return PLACEMENT_POLICIES[name]()
    except KeyError:
        allowed = ", ".join(sorted(PLACEMENT_POLICIES))
        raise InvalidArgument("placement", f"unknown policy {name!r}; choose one of: {allowed}") from None
