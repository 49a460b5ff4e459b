"""The placement seam: which node gets a task.

Pure and vectorized: a request vector and a read-only NodeMatrixView in, a row index
(or None) out; no Python loop over nodes. Randomness comes in as a seeded
`random.Random`. Ties go to the first node in name order (`view.order`), so every
decision is deterministic. Scores normalize each resource by the largest capacity of
that kind in the cluster, so heterogeneous nodes compare on one scale."""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

import numpy as np

from tcluster.errors import InvalidArgument
from tcluster.scheduler.nodestate import NodeMatrixView

EPSILON = 1e-9   # the same slack as Resources.fits_in


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


class _Scratch:
    """Reusable work arrays: at 10,000 nodes, allocating temporaries costs as much as
    the arithmetic. Invisible to callers; decisions do not depend on it."""

    def __init__(self) -> None:
        self.size = -1

    def ensure(self, n: int) -> _Scratch:
        if n != self.size:
            self.size = n
            self.score, self.term = np.empty(n), np.empty(n)
            self.terms = np.empty((0, n))
            self.ok, self.cmp = np.empty(n, dtype=bool), np.empty(n, dtype=bool)
        return self

    def kinds(self, k: int) -> np.ndarray:
        if self.terms.shape[0] != k:
            self.terms = np.empty((k, self.size))
        return self.terms



def _sum_rows(terms: np.ndarray, out: np.ndarray) -> None:
    """out = terms[0] + terms[1] + ... left to right (the reference's order)."""
    if len(terms) == 2:
        np.add(terms[0], terms[1], out=out)
        return
    np.copyto(out, terms[0])
    for row in terms[1:]:
        out += row


def fit_mask(request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None,
             scratch: _Scratch | None = None) -> np.ndarray:
    s = (scratch or _Scratch()).ensure(len(view.schedulable))
    ok, cmp, free_by_kind = s.ok, s.cmp, view.free_by_kind
    if eligible is None:
        np.copyto(ok, view.schedulable)
    else:
        np.logical_and(eligible, view.schedulable, out=ok)
    for kind, amount in enumerate(request.tolist()):
        if amount > 0:  # a kind the task does not ask for never blocks it
            np.greater_equal(free_by_kind[kind], amount - EPSILON, out=cmp)
            np.logical_and(ok, cmp, out=ok)
    return ok


def _first(ok: np.ndarray, order: np.ndarray) -> int | None:
    """The first fitting row in name order."""
    in_order = ok[order]
    j = int(in_order.argmax())
    return int(order[j]) if in_order[j] else None


def _lowest(s: _Scratch, rank: np.ndarray) -> int | None:
    """The fitting row with the lowest s.score; ties go to the first in name order.
    Exact ties are rare on a busy cluster, so only tied rows are ranked. Clobbers s.score."""
    np.logical_not(s.ok, out=s.cmp)
    np.putmask(s.score, s.cmp, np.inf)   # twice as fast as copyto(where=) here
    return _argmin_ranked(s.score, s.cmp, rank)


def _argmin_ranked(score: np.ndarray, cmp: np.ndarray, rank: np.ndarray) -> int | None:
    """The row with the lowest finite score, ties to the first in name order; uses cmp."""
    row = int(score.argmin())
    if score[row] == np.inf:
        return None   # nothing fits
    np.equal(score, score[row], out=cmp)
    if np.count_nonzero(cmp) == 1:
        return row
    tied = np.flatnonzero(cmp)
    return int(tied[rank[tied].argmin()])


def _highest(s: _Scratch, rank: np.ndarray) -> int | None:
    np.negative(s.score, out=s.score)
    return _lowest(s, rank)


class _Policy:
    name = ""

    def __init__(self) -> None:
        self._scratch = _Scratch()

    def choose(self, request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None,
               rng: random.Random) -> int | None:
        fit_mask(request, view, eligible, self._scratch)
        return self._pick(request, view, self._scratch, rng)

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: _Scratch, rng: random.Random) -> int | None:
        raise NotImplementedError

    def choose_each(self, request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None,
                    rng: random.Random) -> Iterator[int | None]:
        while True:
            row = self.choose(request, view, eligible, rng)
            yield row
            if row is None:
                return


class FirstFit(_Policy):
    """The first node in name order where the task fits."""
    name = "first-fit"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: _Scratch, rng: random.Random) -> int | None:
        return _first(s.ok, view.order)


class RandomFit(_Policy):
    """A uniformly random node where the task fits."""
    name = "random-fit"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: _Scratch, rng: random.Random) -> int | None:
        rows = view.order[s.ok[view.order]]   # fitting rows in name order
        return int(rows[rng.randrange(len(rows))]) if len(rows) else None


def dominant_kind(request: np.ndarray, view: NodeMatrixView) -> int:
    return int(np.argmax(request / view.scale))


class BestFit(_Policy):
    """The node left with the least of the task's dominant resource."""
    name = "best-fit"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: _Scratch, rng: random.Random) -> int | None:
        kind = dominant_kind(request, view)
        np.subtract(view.free_by_kind[kind], request[kind], out=s.score)
        return _lowest(s, view.rank)


class WorstFit(_Policy):
    """Spreads: the node left with the most of the task's dominant resource."""
    name = "worst-fit"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: _Scratch, rng: random.Random) -> int | None:
        kind = dominant_kind(request, view)
        np.subtract(view.free_by_kind[kind], request[kind], out=s.score)
        return _highest(s, view.rank)


@dataclass
class _Scores:
    """One request's anbf scores (inf: does not fit) in node-name order, so the first
    minimum is the decision, ties included; current as of the round's `seen`-th placement."""
    ordered: np.ndarray
    amounts: list[float]
    scaled: list[float]
    eligible: np.ndarray | None   # held, so that its id() stays its own
    seen: int = 0


RESCORE_LIMIT = 32      # rows placed since a request's scores: beyond, a fresh pass is cheaper
ROUND_CACHE = 64        # requests whose scores a round keeps (10,000 nodes: 80 KB each)


class AffinityNumberBestFit(_Policy):
    """TCluster's ANBF (section 4.2): the minimum Euclidean distance between the
    normalized request and the node's normalized free resources.

    Within a round (begin_round() .. end_round(), as schedule_round calls them) the matrix
    changes only by the caller allocating each row choose() returns, so the scores of a
    request are kept and only the rows placed since are scored again: a burst of tasks
    asking alike costs one pass a round, not one a task. The decisions stay choose()'s."""
    name = "anbf"

    def __init__(self) -> None:
        super().__init__()
        self._cache: OrderedDict[tuple[bytes, int], _Scores] | None = None
        self._placed: list[int] = []

    def begin_round(self) -> None:
        self._cache, self._placed = OrderedDict(), []

    def end_round(self) -> None:
        self._cache, self._placed = None, []

    def unchoose(self, rows: list[int], request: np.ndarray) -> None:
        """The caller released these rows again (a gang that did not fit): scored again
        next time, or a later job of the round would see them still taken."""
        if self._cache is not None:
            self._placed.extend(rows)

    def choose(self, request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None,
               rng: random.Random) -> int | None:
        if self._cache is None:
            return super().choose(request, view, eligible, rng)
        key = (request.tobytes(), id(eligible))
        entry = self._cache.get(key)
        if entry is None or entry.eligible is not eligible or len(self._placed) - entry.seen > RESCORE_LIMIT:
            entry = self._cache[key] = self._fresh(request, view, eligible)
            if len(self._cache) > ROUND_CACHE:
                self._cache.popitem(last=False)
        else:
            for again in set(self._placed[entry.seen:]):
                entry.ordered[view.rank[again]] = _row_score(again, entry.amounts, entry.scaled, view, eligible)
            self._cache.move_to_end(key)
        row = _first_lowest(entry.ordered, view.order)
        entry.seen = len(self._placed)   # its own row, placed now, is scored again next time
        if row is not None:
            self._placed.append(row)
        return row

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: _Scratch, rng: random.Random) -> int | None:
        self._score(request / view.scale, view, s)
        return _lowest(s, view.rank)

    @staticmethod
    def _score(scaled: np.ndarray, view: NodeMatrixView, s: _Scratch, out: np.ndarray | None = None) -> None:
        # (free/scale - request/scale)^2 summed over kinds in order, as the reference does;
        # whole-matrix ufuncs keep the number of numpy calls independent of the kinds.
        terms = s.kinds(len(scaled))
        np.subtract(view.normalized_free_by_kind, scaled[:, None], out=terms)
        np.multiply(terms, terms, out=terms)
        _sum_rows(terms, s.score if out is None else out)

    def _fresh(self, request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None) -> _Scores:
        """Every row scored, in arrays of its own (the scratch serves other calls)."""
        s = self._scratch
        fit_mask(request, view, eligible, s)
        scaled = request / view.scale
        self._score(scaled, view, s)
        np.logical_not(s.ok, out=s.cmp)
        np.putmask(s.score, s.cmp, np.inf)
        return _Scores(s.score[view.order], request.tolist(), scaled.tolist(), eligible)

    def choose_each(self, request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None,
                    rng: random.Random) -> Iterator[int | None]:
        """One pass scores every node; a placement changes only its own row, so each
        further task re-scores that row alone (the same float operations, in Python) and
        takes the minimum again: a job of k tasks costs one pass and k argmins."""
        entry = self._fresh(request, view, eligible)
        while (row := _first_lowest(entry.ordered, view.order)) is not None:
            yield row
            entry.ordered[view.rank[row]] = _row_score(row, entry.amounts, entry.scaled, view, eligible)
        yield None


def _first_lowest(ordered: np.ndarray, order: np.ndarray) -> int | None:
    """The row of the lowest finite score in name order; the first of equals wins."""
    if not len(ordered):
        return None   # no nodes at all
    position = int(ordered.argmin())
    return None if ordered[position] == np.inf else int(order[position])


def _row_score(row: int, amounts: list[float], scaled: list[float], view: NodeMatrixView,
               eligible: np.ndarray | None) -> float:
    """One row's anbf score as the vectorized pass computes it (inf: the task does not fit)."""
    if not view.schedulable[row] or (eligible is not None and not eligible[row]):
        return np.inf
    for have, amount in zip(view.free_by_kind[:, row].tolist(), amounts):
        if amount > 0 and not have >= amount - EPSILON:
            return np.inf
    total = 0.0   # 0.0 + x is x: the same sum as terms[0] + terms[1] + ...
    for normalized, wanted in zip(view.normalized_free_by_kind[:, row].tolist(), scaled):
        gap = normalized - wanted
        total += gap * gap
    return total


class Tetris(_Policy):
    """Tetris (Grandl et al., SIGCOMM 2014): the largest dot product of the normalized
    request and free vectors, i.e. the best-aligned node."""
    name = "tetris"

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: _Scratch, rng: random.Random) -> int | None:
        terms = s.kinds(len(request))
        np.multiply(view.normalized_free_by_kind, (request / view.scale)[:, None], out=terms)
        _sum_rows(terms, s.score)
        return _highest(s, view.rank)


def _lotes() -> PlacementPolicy:
    """LoTES bin targets (scheduler/lotes); imported late: it builds on the classes above."""
    from tcluster.scheduler.lotes.policy import LotesPlacement
    return LotesPlacement()


PLACEMENT_POLICIES: dict[str, Callable[[], PlacementPolicy]] = {
    **{policy.name: policy for policy in (AffinityNumberBestFit, FirstFit, RandomFit, BestFit, WorstFit, Tetris)},
    "lotes": _lotes,
}
DEFAULT_PLACEMENT = AffinityNumberBestFit.name


def make_placement(name: str) -> PlacementPolicy:
    try:
        return PLACEMENT_POLICIES[name]()
    except KeyError:
        allowed = ", ".join(sorted(PLACEMENT_POLICIES))
        raise InvalidArgument("placement", f"unknown policy {name!r}; choose one of: {allowed}") from None
