"""What every placement policy builds on: the fit mask, reusable scratch arrays, the
ranking helpers (ties to the first node in name order) and the base class `Policy`, whose
subclasses pick a row among those the mask lets through (scheduler/placement.py, anbf.py,
lotes/policy.py)."""

from __future__ import annotations

import random
from typing import Iterator

import numpy as np

from tcluster.scheduler.nodestate import NodeMatrixView

EPSILON = 1e-9   # the same slack as Resources.fits_in


class Scratch:
    """Reusable work arrays: at 10,000 nodes, allocating temporaries costs as much as
    the arithmetic. Invisible to callers; decisions do not depend on it."""

    def __init__(self) -> None:
        self.size = -1

    def ensure(self, n: int) -> Scratch:
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


def sum_rows(terms: np.ndarray, out: np.ndarray) -> None:
    """out = terms[0] + terms[1] + ... left to right (the reference's order)."""
    if len(terms) == 2:
        np.add(terms[0], terms[1], out=out)
        return
    np.copyto(out, terms[0])
    for row in terms[1:]:
        out += row


def fit_mask(request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None,
             scratch: Scratch | None = None) -> np.ndarray:
    s = (scratch or Scratch()).ensure(len(view.schedulable))
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


def first_in_order(ok: np.ndarray, order: np.ndarray) -> int | None:
    """The first fitting row in name order."""
    in_order = ok[order]
    j = int(in_order.argmax())
    return int(order[j]) if in_order[j] else None


def lowest_score(s: Scratch, rank: np.ndarray) -> int | None:
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


def highest_score(s: Scratch, rank: np.ndarray) -> int | None:
    np.negative(s.score, out=s.score)
    return lowest_score(s, rank)


class Policy:
    name = ""

    def __init__(self) -> None:
        self._scratch = Scratch()

    def choose(self, request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None,
               rng: random.Random) -> int | None:
        fit_mask(request, view, eligible, self._scratch)
        return self._pick(request, view, self._scratch, rng)

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: Scratch, rng: random.Random) -> int | None:
        raise NotImplementedError

    def choose_each(self, request: np.ndarray, view: NodeMatrixView, eligible: np.ndarray | None,
                    rng: random.Random) -> Iterator[int | None]:
        while True:
            row = self.choose(request, view, eligible, rng)
            yield row
            if row is None:
                return
