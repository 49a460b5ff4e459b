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

from tcluster.federation.lm import LocalManager
from tcluster.federation.messages import LMLayout, LMState, Res
from tcluster.federation.view import LMView

_INT32_MAX = 2**31 - 1


def _dtype(layout: LMLayout) -> type:
    """int32 halves every state's copy; int64 when a capacity would not fit."""
    top = max((max(n.cap, default=0) for n in layout.nodes), default=0)
    return np.int32 if top <= _INT32_MAX else np.int64


class FreeRows(Sequence[Res]):
    """Free room per node as rows of an int array, read and written one node at a time
    as tuples. A state's snapshot is a FreeRows over a copy nobody writes."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def __getitem__(self, i: Any) -> Any:
        return tuple(int(x) for x in self.rows[i])

    def __setitem__(self, i: int, value: Res) -> None:
        self.rows[i] = value

    def __iter__(self) -> Iterator[Res]:
        return (tuple(row) for row in self.rows.tolist())


class MirroredFree(list):  # type: ignore[type-arg]
    """An LM's own books: the list of tuples its checks read (fast one-node reads), with
    an array mirror that each write updates, so that a state is one array copy."""

    def __init__(self, caps: list[Res], dtype: type) -> None:
        super().__init__(caps)
        self.rows = np.array(caps, dtype=dtype).reshape(len(caps), -1)

    def __setitem__(self, i: Any, value: Any) -> None:
        super().__setitem__(i, value)
        self.rows[i] = value


class ArrayLocalManager(LocalManager):
    """A LocalManager whose states carry a FreeRows snapshot (the simulator's LMs have no
    live `room`)."""

    def __init__(self, layout: LMLayout, **kwargs: Any) -> None:
        super().__init__(layout, **kwargs)
        self.free = MirroredFree(self.free, _dtype(layout))

    def _free_now(self) -> tuple[Res, ...]:
        assert isinstance(self.free, MirroredFree)
        return FreeRows(self.free.rows.copy())  # type: ignore[return-value]


class ArrayLMView(LMView):
    """An LMView over an int array; its answers are LMView's, node for node."""

    def __init__(self, layout: LMLayout, n_gms: int, n_constraints: int) -> None:
        super().__init__(layout, n_gms, n_constraints)
        caps = [n.cap for n in layout.nodes]
        self.rows = np.array(caps, dtype=_dtype(layout)).reshape(len(caps), -1)
        self.free = FreeRows(self.rows)  # type: ignore[assignment]
        self.part_rows = [np.array(p.nodes, dtype=np.intp) for p in self.parts]
        self._cand: dict[tuple[int, int], np.ndarray] = {}

    def apply(self, state: LMState) -> bool:
        if not self.newer(state.epoch, state.version):
            return False
        stamp = (state.epoch, state.version)
        kept = {n: v for n, v in self.node_news.items() if v > stamp}
        new = state.free.rows if isinstance(state.free, FreeRows) else np.array(state.free)
        if kept:
            idx = np.fromiter(kept, dtype=np.intp, count=len(kept))
            held = self.rows[idx]
            self.rows[:] = new
            self.rows[idx] = held
        else:
            self.rows[:] = new
        self.node_news = kept
        self.epoch, self.version = stamp
        self.state = state
        return True

    def _candidates(self, owner: int, pc: int) -> np.ndarray:
        """The partition's nodes satisfying `pc`, as a bool per partition position."""
        key = (owner, pc)
        cand = self._cand.get(key)
        if cand is None:
            n = len(self.parts[owner].nodes)
            bits = self.parts[owner].candidates(pc)
            raw = np.frombuffer(bits.to_bytes((n + 7) // 8 or 1, "little"), dtype=np.uint8)
            cand = np.unpackbits(raw, bitorder="little")[:n].astype(bool)
            self._cand[key] = cand
        return cand

    def match(self, owner: int, req: Res, pc: int) -> int:
        cand = self._candidates(owner, pc)
        if not cand.any():
            return -1
        d = min(len(req), self.rows.shape[1])          # fits() zips: the shorter one counts
        rows = self.rows[self.part_rows[owner], :d]
        ok = cand & (rows >= np.asarray(req[:d])).all(axis=1)
        k = int(ok.argmax())
        return self.parts[owner].nodes[k] if ok[k] else -1
