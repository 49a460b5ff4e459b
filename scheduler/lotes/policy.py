"""`--placement lotes`: the placement policy that dispatches toward LoTES bin targets.

Without a plan (none solved yet, an LP infeasible, the solver missing) it decides as anbf
and `fallback` says why. The policy reads a LotesBook the caller owns; the caller tells the
book when a task starts and ends (`book.started(node, k)` / `book.ended(node, k)`), as it
tells the NodeMatrix. Within one scheduling round the book is not told yet, so the policy
counts its own choices since `begin_round()` and scores with them: two tasks of a round
do not both chase the same machine's last free slot of a class."""

from __future__ import annotations

import random

import numpy as np

from tcluster.scheduler.lotes.dispatch import LotesBook, choose_row
from tcluster.scheduler.nodestate import NodeMatrixView
from tcluster.scheduler.anbf import AffinityNumberBestFit
from tcluster.scheduler.policybase import Policy, Scratch


class LotesPlacement(Policy):
    name = "lotes"

    def __init__(self, book: LotesBook | None = None) -> None:
        super().__init__()
        self.book = book if book is not None else LotesBook()
        self._fallback = AffinityNumberBestFit()
        self._round: np.ndarray | None = None   # (rows, classes): chosen since begin_round()

    @property
    def fallback(self) -> str | None:
        """Why the policy decides as anbf, or None when it follows a plan."""
        return None if self.book.plan is not None else f"lotes falls back to anbf: {self.book.reason}"

    def begin_round(self) -> None:
        self._round = None

    def unchoose(self, rows: list[int], request: np.ndarray) -> None:
        """The caller released these rows again (a gang that did not fit): not counted."""
        k = self.book.classify(request) if self._round is not None and self.book.plan is not None else None
        if k is not None and self._round is not None:
            for row in rows:
                self._round[row, k] -= 1

    def _pick(self, request: np.ndarray, view: NodeMatrixView, s: Scratch, rng: random.Random) -> int | None:
        plan = self.book.plan
        if plan is None:
            return self._fallback._pick(request, view, s, rng)
        k = self.book.classify(request)
        assert k is not None
        config_rows, target, running = self.book.arrays(view)
        if self._round is None or self._round.shape != running.shape:
            self._round = np.zeros_like(running)
        row = choose_row(k, s.ok, config_rows, target[:, k], running[:, k], plan, view, rng,
                         self.book.members(view, k), self._round[:, k])
        if row is not None:
            self._round[row, k] += 1
        return row
