"""`anbf`: TCluster's Affinity Number Best Fit, the default placement policy, with the
per-round score cache that makes a burst of alike tasks cost one pass (see its class)."""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from tcluster.scheduler.nodestate import NodeMatrixView
from tcluster.scheduler.policybase import EPSILON, Policy, Scratch, fit_mask, lowest_score, sum_rows


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


class AffinityNumberBestFit(Policy):
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

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: Scratch, rng: random.Random) -> int | None:
        self._score(request / view.scale, view, s)
        return lowest_score(s, view.rank)

    @staticmethod
    def _score(scaled: np.ndarray, view: NodeMatrixView, s: Scratch, out: np.ndarray | None = None) -> None:
        # (free/scale - request/scale)^2 summed over kinds in order, as the reference does;
        # whole-matrix ufuncs keep the number of numpy calls independent of the kinds.
        terms = s.kinds(len(scaled))
        np.subtract(view.normalized_free_by_kind, scaled[:, None], out=terms)
        np.multiply(terms, terms, out=terms)
        sum_rows(terms, s.score if out is None else out)

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
