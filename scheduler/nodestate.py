"""Node state as numpy arrays, for placement at warehouse scale.

One row per node, kept sorted by node name so that `argmin`/`argmax` break ties by
name without a sort. One column per resource kind. Updates are incremental: a
placement or a release touches one row; only a node joining or leaving shifts rows,
which is rare next to placements. Label matching uses packed bit vectors per
(key, value) and per key, combined with AND, as Megha does (section IV-B).

The master and the simulator own a NodeMatrix; policies only see a NodeMatrixView."""

from __future__ import annotations

import bisect
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import numpy as np

from tcluster.resources import CPU, MEMORY, Resources

_BASE_KINDS = (CPU, MEMORY)


@dataclass(frozen=True)
class NodeMatrixView:
    """Read-only arrays a placement policy decides on. Row i is node names[i]."""
    names: Sequence[str]
    kinds: tuple[str, ...]
    capacity: np.ndarray      # (nodes, kinds)
    free: np.ndarray          # (nodes, kinds), what is left for new tasks
    free_by_kind: np.ndarray  # (kinds, nodes), the same numbers, contiguous per kind
    scale: np.ndarray         # (kinds,), the largest capacity of each kind (1 where none)
    schedulable: np.ndarray   # (nodes,) bool: READY and connected

    def request_vector(self, request: Resources) -> np.ndarray | None:
        """The request over this view's kinds; None if it asks for a kind no node has."""
        amounts = request.as_dict()
        if any(amount > 0 and kind not in self.kinds for kind, amount in amounts.items()):
            return None
        return np.array([amounts.get(kind, 0.0) for kind in self.kinds], dtype=np.float64)


class NodeMatrix:
    def __init__(self, kinds: Sequence[str] = _BASE_KINDS) -> None:
        self.kinds: list[str] = list(dict.fromkeys([*_BASE_KINDS, *kinds]))
        self.names: list[str] = []
        self.labels: list[dict[str, str]] = []
        self._capacity = np.zeros((0, len(self.kinds)))
        self._allocated = np.zeros((0, len(self.kinds)))
        self._reported = np.zeros((0, len(self.kinds)))   # free as the agent last said (inf: unknown)
        self._schedulable = np.zeros(0, dtype=bool)
        self._free_t = np.zeros((len(self.kinds), 0))
        self._masks: dict[tuple[str, str | None], np.ndarray] = {}   # packed uint64 words
        self._names_tuple: tuple[str, ...] = ()
        self.generation = 0   # bumps whenever rows or labels change (mask caches key on it)

    # ---- membership ----

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: str) -> bool:
        return self.row(name) is not None

    def row(self, name: str) -> int | None:
        i = bisect.bisect_left(self.names, name)
        return i if i < len(self.names) and self.names[i] == name else None

    def upsert(self, name: str, capacity: Resources, labels: Mapping[str, str], schedulable: bool = True) -> None:
        """Adds a node, or updates its capacity and labels (allocations are kept)."""
        self._ensure_kinds(capacity)
        i = self.row(name)
        if i is None:
            i = bisect.bisect_left(self.names, name)
            self.names.insert(i, name)
            self.labels.insert(i, {})
            zeros = np.zeros(len(self.kinds))
            self._capacity = np.insert(self._capacity, i, zeros, axis=0)
            self._allocated = np.insert(self._allocated, i, zeros, axis=0)
            self._reported = np.insert(self._reported, i, np.full(len(self.kinds), np.inf), axis=0)
            self._schedulable = np.insert(self._schedulable, i, False)
        self._capacity[i] = self._vector(capacity)
        self.labels[i] = dict(labels)
        self._schedulable[i] = schedulable
        self._rebuild()

    def remove(self, name: str) -> None:
        i = self.row(name)
        if i is None:
            return
        del self.names[i], self.labels[i]
        self._capacity = np.delete(self._capacity, i, axis=0)
        self._allocated = np.delete(self._allocated, i, axis=0)
        self._reported = np.delete(self._reported, i, axis=0)
        self._schedulable = np.delete(self._schedulable, i)
        self._rebuild()

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        i = self.row(name)
        if i is not None:
            self._schedulable[i] = schedulable

    # ---- resources ----

    def allocate(self, name: str, request: Resources, sign: float = 1.0) -> None:
        i = self.row(name)
        if i is None:
            return
        self._ensure_kinds(request)
        self._allocated[i] += sign * self._vector(request)
        self._refresh_row(i)

    def release(self, name: str, request: Resources) -> None:
        self.allocate(name, request, sign=-1.0)

    @contextmanager
    def tentative(self) -> Iterator[None]:
        """Allocations inside are undone exactly on exit (no float drift), in place, so
        views taken before stay valid."""
        allocated, free_t = self._allocated.copy(), self._free_t.copy()
        try:
            yield
        finally:
            self._allocated[...] = allocated
            self._free_t[...] = free_t

    def report_free(self, name: str, free: Resources) -> None:
        """What the agent says is free; the master uses the smaller of this and its own books."""
        i = self.row(name)
        if i is not None:
            reported = np.array([free.get(kind) for kind in self.kinds])
            if not np.array_equal(reported, self._reported[i]):
                self._reported[i] = reported
                self._refresh_row(i)

    def free(self, name: str) -> Resources:
        i = self.row(name)
        assert i is not None, name
        return Resources.of(dict(zip(self.kinds, self._free_t[:, i].tolist())))

    def total_capacity(self) -> Resources:
        """Sum over schedulable nodes: the denominator of dominant shares."""
        total = self._capacity[self._schedulable].sum(axis=0)
        return Resources.of(dict(zip(self.kinds, total.tolist())))

    def view(self) -> NodeMatrixView:
        scale = self._capacity.max(axis=0) if len(self) else np.ones(len(self.kinds))
        # Views share memory with the matrix: one view stays current through a round of
        # allocate() calls; only membership changes (which rebuild the arrays) stale it.
        return NodeMatrixView(self._names_tuple, tuple(self.kinds), _read_only(self._capacity),
                              _read_only(self._free_t.T), _read_only(self._free_t),
                              np.where(scale > 0, scale, 1.0), _read_only(self._schedulable))

    # ---- labels ----

    def label_mask(self, key: str, value: str | None) -> np.ndarray:
        """Packed bits of the nodes whose label `key` equals `value` (None: has the key)."""
        words = (len(self) + 63) // 64
        return self._masks.get((key, value), np.zeros(words, dtype=np.uint64))

    def all_mask(self) -> np.ndarray:
        return pack_bits(np.ones(len(self), dtype=bool))

    # ---- internals ----

    def _ensure_kinds(self, resources: Resources) -> None:
        new = [k for k in resources.as_dict() if k not in self.kinds]
        for kind in new:
            self.kinds.append(kind)
            self._capacity = np.column_stack([self._capacity, np.zeros(len(self))])
            self._allocated = np.column_stack([self._allocated, np.zeros(len(self))])
            self._reported = np.column_stack([self._reported, np.full(len(self), np.inf)])
        if new:
            self._rebuild()

    def _vector(self, resources: Resources) -> np.ndarray:
        amounts = resources.as_dict()
        return np.array([amounts.get(kind, 0.0) for kind in self.kinds], dtype=np.float64)

    def _refresh_row(self, i: int) -> None:
        self._free_t[:, i] = np.minimum(self._capacity[i] - self._allocated[i], self._reported[i])

    def _rebuild(self) -> None:
        self._names_tuple = tuple(self.names)
        self._free_t = np.ascontiguousarray(np.minimum(self._capacity - self._allocated, self._reported).T)
        self._masks = _build_masks(self.labels)
        self.generation += 1


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def pack_bits(mask: np.ndarray) -> np.ndarray:
    """bool (n,) -> uint64 words, bit i of the vector at word i // 64, bit i % 64."""
    padded = np.zeros(((len(mask) + 63) // 64) * 64, dtype=bool)
    padded[: len(mask)] = mask
    return np.packbits(padded, bitorder="little").view(np.uint64)


def unpack_bits(words: np.ndarray, n: int) -> np.ndarray:
    return np.unpackbits(words.view(np.uint8), bitorder="little")[:n].astype(bool)


def _build_masks(labels: list[dict[str, str]]) -> dict[tuple[str, str | None], np.ndarray]:
    rows: dict[tuple[str, str | None], list[int]] = {}
    for i, node_labels in enumerate(labels):
        for key, value in node_labels.items():
            rows.setdefault((key, value), []).append(i)
            rows.setdefault((key, None), []).append(i)
    masks = {}
    for pair, indices in rows.items():
        bits = np.zeros(len(labels), dtype=bool)
        bits[indices] = True
        masks[pair] = pack_bits(bits)
    return masks
