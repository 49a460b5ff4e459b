"""The simulator's array engine (issue 38): the same GM and LM code (federation/gm.py,
federation/lm.py) with each LM's free room kept in one numpy array instead of a list of
tuples, so that what costs O(nodes) per message runs in C:

- an LM's state snapshots its free room as one array copy (a memcpy), not a tuple of
  per-node tuples;
- a GM's view applies a full state by copying that array over its own, keeping the nodes
  that newer deltas told about (LMView.apply's rule, row by row);
- Alg. 1's first fit ANDs the partition's constraint bits (unpacked once per (partition,
  constraints) and cached) with "every dimension fits" over the partition's rows, and takes
  the first set index: the node match_task's walk would reach first.

Reads and writes of one node (`free[i]`) keep the object engine's interface (a tuple of
ints), so the check-and-commit, the deltas, the debits and Alg. 2 run unchanged. The
object engine stays (FedConfig.engine = "object") for the side-by-side bench
(bench/federation_sim.py), which checks that both give the same ledger."""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np
from numpy.typing import DTypeLike

from tcluster.federation.lm import LocalManager
from tcluster.federation.messages import LMLayout, LMState, Res
from tcluster.federation.view import LMView

_INT32_MAX = 2**31 - 1


def _dtype(layout: LMLayout) -> DTypeLike:
    """int32 halves every state's copy; int64 when a capacity would not fit."""
    top = max((max(n.cap, default=0) for n in layout.nodes), default=0)
    return np.int32 if top <= _INT32_MAX else np.int64


class FreeRows(Sequence[Res]):
    """Free room per node as the columns of a (dimensions x nodes) int array, read and
    written one node at a time as tuples. A state's snapshot is a FreeRows over a copy
    nobody writes. `writes` counts the writes, so a view knows when its cached fit is stale."""

    def __init__(self, cols: np.ndarray) -> None:
        self.cols = cols
        self.writes = 0

    def __len__(self) -> int:
        return int(self.cols.shape[1])

    def __getitem__(self, i: Any) -> Any:
        return tuple(self.cols[:, i].tolist())

    def __setitem__(self, i: int, value: Res) -> None:
        self.cols[:, i] = value
        self.writes += 1

    def __iter__(self) -> Iterator[Res]:
        return (tuple(col) for col in self.cols.T.tolist())


def _columns(caps: list[Res], dtype: DTypeLike) -> np.ndarray:
    return np.ascontiguousarray(np.array(caps, dtype=dtype).reshape(len(caps), -1).T)


class MirroredFree(list):  # type: ignore[type-arg]
    """An LM's own books: the list of tuples its checks read (fast one-node reads), with
    an array mirror that each write updates, so that a state is one array copy."""

    def __init__(self, caps: list[Res], dtype: DTypeLike) -> None:
        super().__init__(caps)
        self.cols = _columns(caps, dtype)

    def __setitem__(self, i: Any, value: Any) -> None:
        super().__setitem__(i, value)
        self.cols[:, i] = value


class ArrayLocalManager(LocalManager):
    """A LocalManager whose states carry a FreeRows snapshot (the simulator's LMs have no
    live `room`)."""

    def __init__(self, layout: LMLayout, **kwargs: Any) -> None:
        super().__init__(layout, **kwargs)
        self.free = MirroredFree(self.free, _dtype(layout))

    def _free_now(self) -> tuple[Res, ...]:
        assert isinstance(self.free, MirroredFree)
        return FreeRows(self.free.cols.copy())  # type: ignore[return-value]


class ArrayLMView(LMView):
    """An LMView over an int array; its answers are LMView's, node for node. A partition
    lists its nodes in index order, so Alg. 1's first fit in partition order is the
    lowest LM node index that is in the partition, satisfies the constraints and fits:
    one mask per (partition, constraints), cached, ANDed with one fit mask per request
    size, cached until the next write."""

    def __init__(self, layout: LMLayout, n_gms: int, n_constraints: int) -> None:
        super().__init__(layout, n_gms, n_constraints)
        self.rows = FreeRows(_columns([n.cap for n in layout.nodes], _dtype(layout)))
        self.free = self.rows  # type: ignore[assignment]
        self._cand: dict[tuple[int, int], np.ndarray | None] = {}
        self._fit: dict[Res, np.ndarray] = {}
        self._fit_at = -1

    def apply(self, state: LMState) -> bool:
        if not self.newer(state.epoch, state.version):
            return False
        stamp = (state.epoch, state.version)
        kept = {n: v for n, v in self.node_news.items() if v > stamp}
        new = state.free.cols if isinstance(state.free, FreeRows) else _columns(list(state.free), self.rows.cols.dtype)
        cols = self.rows.cols
        if kept:
            idx = np.fromiter(kept, dtype=np.intp, count=len(kept))
            held = cols[:, idx]
            cols[:] = new
            cols[:, idx] = held
        else:
            cols[:] = new
        self.rows.writes += 1
        self.node_news = kept
        self.epoch, self.version = stamp
        self.state = state
        return True

    def _candidates(self, owner: int, pc: int) -> np.ndarray | None:
        """The LM's nodes in `owner`'s partition satisfying `pc`; None when there are none."""
        key = (owner, pc)
        if key not in self._cand:
            part = self.parts[owner]
            cand = np.zeros(len(self.layout.nodes), dtype=bool)
            bits = part.candidates(pc)
            while bits:
                low = bits & -bits
                cand[part.nodes[low.bit_length() - 1]] = True
                bits ^= low
            self._cand[key] = cand if cand.any() else None
        return self._cand[key]

    def _fits(self, req: Res) -> np.ndarray:
        if self._fit_at != self.rows.writes:
            self._fit.clear()
            self._fit_at = self.rows.writes
        fit = self._fit.get(req)
        if fit is None:
            cols = self.rows.cols
            fit = np.ones(cols.shape[1], dtype=bool)
            for d in range(min(len(req), cols.shape[0])):     # fits() zips: the shorter one counts
                fit &= cols[d] >= req[d]
            self._fit[req] = fit
        return fit

    def match(self, owner: int, req: Res, pc: int) -> int:
        cand = self._candidates(owner, pc)
        if cand is None:
            return -1
        ok = cand & self._fits(req)
        k = int(ok.argmax())
        return k if ok[k] else -1


# Below this many nodes an LM's per-node Python loops beat numpy's per-call cost (bench/
# federation_sim.py: the object engine is 1.3x faster with 100-node LMs, 1.5x slower with
# 1,000): such LMs and the GMs' views of them keep the object classes. Answers are the same.
ARRAY_MIN_NODES = 256


def lm_for(layout: LMLayout, **kwargs: Any) -> LocalManager:
    return ArrayLocalManager(layout, **kwargs) if len(layout.nodes) >= ARRAY_MIN_NODES \
        else LocalManager(layout, **kwargs)


def view_for(layout: LMLayout, n_gms: int, n_constraints: int) -> LMView:
    return ArrayLMView(layout, n_gms, n_constraints) if len(layout.nodes) >= ARRAY_MIN_NODES \
        else LMView(layout, n_gms, n_constraints)
