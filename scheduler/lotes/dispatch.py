"""Stage 3 of LoTES (section 4.3): online dispatch toward each machine's bin.

On arrival of a class-k task: roulette over the configurations with Delta_jk > 0 by the
routing shares rho_jk; within the chosen configuration, among the machines whose bin holds
class k and where the task fits, the one with the highest v = N(bin, k) - running(k); then
the remaining configurations with Delta > 0, again by roulette; then any machine that fits
(first in name order: idle capacity anywhere is used before the task waits); else None.

On a completion at machine m, waiting tasks are offered by `offer_order`: only classes with
Delta_(cfg(m), k) > 0, highest v first. Both are pure functions of arrays; the LotesBook
holds the arrays and is owned by the caller, like the NodeMatrix."""

from __future__ import annotations

import random
from typing import Iterable

import numpy as np

from tcluster.scheduler.lotes.classes import classify
from tcluster.scheduler.lotes.model import Plan
from tcluster.scheduler.nodestate import NodeMatrixView


def roulette(weights: dict[int, float], rng: random.Random) -> int:
    """u ~ U[0, 1): pick j where the cumulative weight first exceeds u * total."""
    total = sum(weights.values())
    u, acc = rng.random() * total, 0.0
    for j, w in weights.items():
        acc += w
        if u < acc:
            return j
    return next(reversed(weights))


def choose_row(k: int, fits: np.ndarray, config_rows: np.ndarray, target: np.ndarray, running: np.ndarray,
               plan: Plan, view: NodeMatrixView, rng: random.Random,
               members: list[np.ndarray] | None = None, extra: np.ndarray | None = None) -> int | None:
    """fits: (rows,) bool, the task fits and is eligible. target/running: (rows,) for class k.
    members (optional, a cache): per configuration j, the rows of j whose bin holds k.
    extra (optional): (rows,) more running class-k tasks (chosen earlier in this round)."""
    weights = {j: float(plan.routing[j, k]) for j in range(len(plan.routing)) if plan.per_config[j, k] > 0}
    while weights:
        j = roulette(weights, rng)
        del weights[j]
        rows = members[j] if members is not None else np.flatnonzero((config_rows == j) & (target >= 1))
        rows = rows[fits[rows]]   # only the holders of the class are looked at: a tenth of the cluster or less
        if len(rows):
            v = target[rows] - running[rows] - (extra[rows] if extra is not None else 0)
            best = rows[v == v.max()]
            return int(best[0]) if len(best) == 1 else int(best[view.rank[best].argmin()])   # ties: name order
    if not fits.any():
        return None
    in_order = fits[view.order]
    return int(view.order[int(in_order.argmax())])


def offer_order(config: int, target: np.ndarray, running: np.ndarray, plan: Plan,
                waiting: Iterable[int]) -> list[int]:
    """Classes a machine of `config` takes waiting tasks from after a completion, best first:
    only classes the plan gives the configuration (it may stay idle on purpose, section
    4.3.3), by v = N(bin, k) - running(k), ties by class number. Re-ask after each start."""
    active = [k for k in set(waiting) if plan.per_config[config, k] > 0]
    return sorted(active, key=lambda k: (-(int(target[k]) - int(running[k])), k))


class LotesBook:
    """Per-node bin targets and running class counts, owned by the master or the simulator.
    Truth is by node name; row-aligned arrays for the vectorized choice are rebuilt when the
    view's rows change and kept in step by started/ended."""

    def __init__(self, plan: Plan | None = None, reason: str = "no LoTES plan yet") -> None:
        self.plan: Plan | None = None
        self.reason = reason
        self.targets: dict[str, tuple[int, np.ndarray]] = {}
        self.running: dict[str, np.ndarray] = {}
        self._names: list[str | None] = []
        self._index: dict[str, int] = {}
        self._view: NodeMatrixView | None = None
        self._config_rows = np.zeros(0, dtype=np.int64)
        self._target_rows = np.zeros((0, 0), dtype=np.int64)
        self._running_rows = np.zeros((0, 0), dtype=np.int64)
        self._means = np.zeros((0, 0))
        if plan is not None:
            self.adopt(plan)

    @property
    def classes(self) -> int:
        return 0 if self.plan is None else len(self.plan.problem.classes)

    def adopt(self, plan: Plan) -> None:
        """A new solution: every machine gets its bin; running counts are kept (they are
        recounted by the caller with `recount` when the classes themselves changed)."""
        self.plan, self.reason = plan, ""
        self.targets = plan.node_targets()
        k = len(plan.problem.classes)
        self.running = {n: _resized(c, k) for n, c in self.running.items()}
        self._means = np.array([c.request for c in plan.problem.classes], dtype=float)
        self._scale = plan.problem.scale()
        self._classes_of: dict[bytes, int] = {}
        self._names, self._view = [], None   # forces a rebuild

    def drop(self, reason: str) -> None:
        """No usable plan (infeasible, solver missing): the policy falls back and says why."""
        self.plan, self.reason, self.targets = None, reason, {}
        self._names, self._view = [], None

    def classify(self, request: np.ndarray) -> int | None:
        if self.plan is None:
            return None
        key = request.tobytes()
        k = self._classes_of.get(key)
        if k is None:
            width = min(len(request), self._means.shape[1])
            k = classify(request[:width], self._means[:, :width], self._scale[:width])
            if len(self._classes_of) < 4096:   # a job's tasks share one request: remember it
                self._classes_of[key] = k
        return k

    def started(self, node: str, k: int) -> None:
        self._count(node, k, +1)

    def ended(self, node: str, k: int) -> None:
        self._count(node, k, -1)

    def recount(self, tasks: Iterable[tuple[str, int]]) -> None:
        """Running counts from scratch: (node, class) of every running task."""
        self.running = {}
        for node, k in tasks:
            self._count(node, k, +1)
        self._names, self._view = [], None

    def arrays(self, view: NodeMatrixView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(config per row, -1 if none; target (rows, K); running (rows, K))."""
        # A view is current for a whole round: compare its rows with ours once per view.
        if view is not self._view and (len(self._names) != len(view.names) or self._names != view.names):
            self._rebuild(view)
        self._view = view
        return self._config_rows, self._target_rows, self._running_rows

    def members(self, view: NodeMatrixView, k: int) -> list[np.ndarray]:
        """Per configuration j, the rows of j whose bin holds class k."""
        config_rows, target, _ = self.arrays(view)
        cached = self._members.get(k)
        if cached is None:
            assert self.plan is not None    # a class k comes of a plan (classify)
            configs = len(self.plan.per_config)
            cached = self._members[k] = [np.flatnonzero((config_rows == j) & (target[:, k] >= 1))
                                         for j in range(configs)]
        return cached

    def _count(self, node: str, k: int, sign: int) -> None:
        counts = self.running.setdefault(node, np.zeros(max(self.classes, k + 1), dtype=np.int64))
        if k >= len(counts):
            counts = self.running[node] = _resized(counts, k + 1)
        counts[k] = max(0, counts[k] + sign)
        row = self._row(node)
        if row is not None and k < self._running_rows.shape[1]:
            self._running_rows[row, k] = counts[k]

    def _row(self, node: str) -> int | None:
        return self._index.get(node)

    def _rebuild(self, view: NodeMatrixView) -> None:
        rows, k = len(view.names), self.classes
        self._names = list(view.names)
        self._members: dict[int, list[np.ndarray]] = {}
        self._index = {n: i for i, n in enumerate(self._names) if n is not None}
        self._config_rows = np.full(rows, -1, dtype=np.int64)
        self._target_rows = np.zeros((rows, k), dtype=np.int64)
        self._running_rows = np.zeros((rows, k), dtype=np.int64)
        for name, i in self._index.items():
            if name in self.targets:
                self._config_rows[i], self._target_rows[i] = self.targets[name][0], self.targets[name][1]
            if name in self.running:
                self._running_rows[i] = _resized(self.running[name], k)


def _resized(counts: np.ndarray, k: int) -> np.ndarray:
    out = np.zeros(k, dtype=np.int64)
    out[: min(k, len(counts))] = counts[:k]
    return out
