"""Node state as numpy arrays, for placement at warehouse scale.

One row per node, one column per resource kind. A node keeps its row for life (rows of
nodes that left are reused), so a join, a leave or a label change touches one row and
one bit per label; a placement or a release touches one row. `order` lists the rows in
node-name order: policies break ties by it, so decisions are deterministic.

Labels are packed bit vectors per (key, value) and per key, combined with AND/OR/NOT
as Megha does (section IV-B).

The master and the simulator own a NodeMatrix; policies only see a NodeMatrixView."""

from __future__ import annotations

import bisect
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterator, Mapping, Sequence

import numpy as np

from tcluster.domain.ceilings import Ceilings
from tcluster.domain.resources import CPU, MEMORY, Resources

_BASE_KINDS = (CPU, MEMORY)
_INITIAL_ROWS = 64


@dataclass(frozen=True)
class NodeMatrixView:
    """Read-only arrays a placement policy decides on; row i is node names[i]."""
    names: Sequence[str | None]   # None: a free row
    kinds: tuple[str, ...]
    capacity: np.ndarray          # (rows, kinds)
    free: np.ndarray              # (rows, kinds), what is left for new tasks
    free_by_kind: np.ndarray      # (kinds, rows), the same numbers, contiguous per kind
    scale: np.ndarray             # (kinds,), the largest capacity of each kind (1 where none)
    schedulable: np.ndarray       # (rows,) bool: a node, READY and connected
    order: np.ndarray             # row numbers of the nodes in name order
    rank: np.ndarray              # (rows,) position of each row in name order
    normalized_free_by_kind: np.ndarray   # (kinds, rows): free_by_kind / scale, kept up to date
    rows: Mapping[str, int]       # node name -> row

    def request_vector(self, request: Resources) -> np.ndarray | None:
        """The request over this view's kinds; None if it asks for a kind no node has."""
        if request.other and any(amount > 0 and kind not in self.kinds for kind, amount in request.other):
            return None
        return resource_vector(request, self.kinds)


class NodeMatrix:
    # Made by _allocate_arrays (and _grow), read by methods above them: their types, here.
    _present: np.ndarray              # packed uint64 words: the rows that hold a node
    _order: np.ndarray                # row numbers, in name order
    _journal: list[tuple[int, list[float]]] | None   # inside `tentative`: rows to restore

    def __init__(self, kinds: Sequence[str] = _BASE_KINDS) -> None:
        self.kinds: list[str] = list(dict.fromkeys([*_BASE_KINDS, *kinds]))
        self.names: list[str | None] = []             # by row
        self.labels: list[dict[str, str]] = []        # by row
        self.ceilings: list[Ceilings] = []            # by row: the limits a job may ask of the node
        self._rows: dict[str, int] = {}
        self._sorted_names: list[str] = []
        self._free_rows: list[int] = []
        self._allocate_arrays(_INITIAL_ROWS)
        self._masks: dict[tuple[str, str | None], np.ndarray] = {}   # packed uint64 words, by row
        self.generation = 0   # bumps when membership or labels change (mask caches key on it)

    # ---- membership ----

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, name: str) -> bool:
        return name in self._rows

    def row(self, name: str) -> int | None:
        return self._rows.get(name)

    def upsert(self, name: str, capacity: Resources, labels: Mapping[str, str], schedulable: bool = True,
               ceilings: Ceilings = Ceilings()) -> None:
        """Adds a node, or updates its capacity, labels and ceilings (allocations are kept)."""
        self._ensure_kinds(capacity)
        i = self._rows.get(name)
        if i is None:
            i = self._new_row(name)
        self._set_labels(i, dict(labels))
        self.ceilings[i] = ceilings
        previous = self._capacity[i].copy()
        self._capacity[i] = self._vector(capacity)
        self._capacity_rows[i] = self._capacity[i].tolist()
        self._schedulable[i] = schedulable
        self._rescale(previous, self._capacity[i])
        self._refresh_row(i)
        self.generation += 1

    def remove(self, name: str) -> None:
        i = self._rows.pop(name, None)
        if i is None:
            return
        self._set_labels(i, {})
        self.ceilings[i] = Ceilings()
        previous = self._capacity[i].copy()
        self._set_bit(self._present, i, False)
        self.names[i] = None
        position = bisect.bisect_left(self._sorted_names, name)
        del self._sorted_names[position]
        self._order = np.delete(self._order, position)
        self._capacity[i] = 0.0
        self._capacity_rows[i] = [0.0] * len(self.kinds)
        self._allocated_rows[i] = [0.0] * len(self.kinds)
        self._reported_rows[i] = [np.inf] * len(self.kinds)
        self._schedulable[i] = False
        self._rescale(previous, self._capacity[i])
        self._refresh_row(i)
        self._free_rows.append(i)
        self._rerank()
        self.generation += 1

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        i = self.row(name)
        if i is not None:
            self._schedulable[i] = schedulable

    # ---- resources ----

    def allocate(self, name: str, request: Resources, sign: float = 1.0) -> None:
        i = self._rows.get(name)
        if i is None:
            return
        if request.other:
            self._ensure_kinds(request)
        amounts = (request.cpu, request.memory) if not request.other else self._vector(request).tolist()
        allocated = self._allocated_rows[i]
        if self._journal is not None:
            self._journal.append((i, list(allocated)))
        for kind, amount in enumerate(amounts):
            if amount:
                allocated[kind] += sign * amount
        self._refresh_row(i)

    def release(self, name: str, request: Resources) -> None:
        self.allocate(name, request, sign=-1.0)

    @contextmanager
    def tentative(self) -> Iterator[None]:
        """Allocations inside are undone exactly on exit (no float drift), in place, so
        views taken before stay valid."""
        self._journal = []
        try:
            yield
        finally:
            journal, self._journal = self._journal, None
            for i, allocated in reversed(journal):   # the oldest copy of a row wins
                self._allocated_rows[i] = allocated
                self._refresh_row(i)

    def report_free(self, name: str, free: Resources) -> None:
        """What the agent says is free; the master uses the smaller of this and its own books."""
        i = self.row(name)
        if i is not None:
            reported = [free.get(kind) for kind in self.kinds]
            if reported != self._reported_rows[i]:
                self._reported_rows[i] = reported
                self._refresh_row(i)

    def is_schedulable(self, name: str) -> bool:
        """READY and connected: a node new tasks may go to."""
        i = self._rows.get(name)
        return i is not None and bool(self._schedulable[i])

    def free(self, name: str) -> Resources:
        i = self._rows[name]
        return Resources.of(dict(zip(self.kinds, self._free_t[:, i].tolist())))

    def total_capacity(self) -> Resources:
        """Sum over schedulable nodes: the denominator of dominant shares."""
        total = self._capacity[: self._used][self._schedulable[: self._used]].sum(axis=0)
        return Resources.of(dict(zip(self.kinds, total.tolist())))

    def view(self) -> NodeMatrixView:
        # The views share memory with the matrix: one view stays current through a round
        # of allocate() calls; a join may grow the arrays and so stale it.
        n = self._used
        return NodeMatrixView(
            self.names, tuple(self.kinds), _read_only(self._capacity[:n]), _read_only(self._free_t[:, :n].T),
            _read_only(self._free_t[:, :n]), self._scale.copy(), _read_only(self._schedulable[:n]),
            _read_only(self._order), _read_only(self._rank[:n]), _read_only(self._normalized_t[:, :n]),
            MappingProxyType(self._rows),
        )

    # ---- labels ----

    def label_mask(self, key: str, value: str | None) -> np.ndarray:
        """Packed bits of the rows whose label `key` equals `value` (None: has the key)."""
        mask = self._masks.get((key, value))
        return mask[: self._words()] if mask is not None else np.zeros(self._words(), dtype=np.uint64)

    def all_mask(self) -> np.ndarray:
        """Packed bits of the rows that hold a node."""
        return self._present[: self._words()]

    # ---- internals ----

    def _allocate_arrays(self, rows: int) -> None:
        k = len(self.kinds)
        self._used = 0
        self._capacity = np.zeros((rows, k))
        # Per row, plain floats: they only feed `free`, and a placement touches one row.
        self._capacity_rows: list[list[float]] = []
        self._allocated_rows: list[list[float]] = []
        self._reported_rows: list[list[float]] = []   # inf: the agent has not said
        self._journal = None
        self._schedulable = np.zeros(rows, dtype=bool)
        self._free_t = np.zeros((k, rows))
        self._normalized_t = np.zeros((k, rows))
        self._scale = np.ones(k)
        self._scale_list = [1.0] * k
        self._largest = np.zeros(k)   # the true maxima; scale is 1 where a kind has none
        self._order = np.zeros(0, dtype=np.int64)
        self._rank = np.zeros(rows, dtype=np.int64)
        self._present = np.zeros(rows // 64 + 1, dtype=np.uint64)

    def _new_row(self, name: str) -> int:
        if self._free_rows:
            i = self._free_rows.pop()
        else:
            if self._used == len(self._schedulable):
                self._grow(2 * len(self._schedulable))
            i, self._used = self._used, self._used + 1
            self.names.append(None)
            self.labels.append({})
            self.ceilings.append(Ceilings())
            k = len(self.kinds)
            self._capacity_rows.append([0.0] * k)
            self._allocated_rows.append([0.0] * k)
            self._reported_rows.append([np.inf] * k)
        self.names[i] = name
        self._rows[name] = i
        self._set_bit(self._present, i, True)
        position = bisect.bisect_left(self._sorted_names, name)
        self._sorted_names.insert(position, name)
        self._order = np.insert(self._order, position, i)   # C memmove: joins stay cheap
        self._rerank()
        return i

    def _rerank(self) -> None:
        self._rank[self._order] = np.arange(len(self._order))

    def _rescale(self, before: np.ndarray, after: np.ndarray) -> None:
        """The largest capacity per kind; when it changes, every normalized row does. A
        node that grows past the largest just raises it; only when the largest node
        shrinks or leaves is the maximum searched again."""
        shrunk = after < before
        if np.any(before[shrunk] >= self._largest[shrunk]):
            self._largest = self._capacity[: self._used].max(axis=0) if self._used else np.zeros(len(self.kinds))
        else:
            self._largest = np.maximum(self._largest, after)
        scale = np.where(self._largest > 0, self._largest, 1.0)
        if not np.array_equal(scale, self._scale):
            self._scale, self._scale_list = scale, scale.tolist()
            self._normalized_t = self._free_t / scale[:, None]

    def _grow(self, rows: int) -> None:
        def grown(array: np.ndarray, fill: float | bool, axis: int) -> np.ndarray:
            shape = list(array.shape)
            shape[axis] = rows - array.shape[axis]
            return np.concatenate([array, np.full(shape, fill, dtype=array.dtype)], axis=axis)
        self._capacity, self._schedulable = grown(self._capacity, 0.0, 0), grown(self._schedulable, False, 0)
        self._free_t, self._normalized_t = grown(self._free_t, 0.0, 1), grown(self._normalized_t, 0.0, 1)
        self._rank = grown(self._rank, 0, 0)
        words = rows // 64 + 1

        def widened(mask: np.ndarray) -> np.ndarray:
            return np.concatenate([mask, np.zeros(words - len(mask), np.uint64)])
        self._masks = {pair: widened(mask) for pair, mask in self._masks.items()}
        self._present = widened(self._present)

    def _set_labels(self, i: int, labels: dict[str, str]) -> None:
        for pair in _pairs(self.labels[i]):
            self._set_bit(self._masks[pair], i, False)
        for pair in _pairs(labels):
            self._set_bit(self._masks.setdefault(pair, np.zeros(len(self._present), dtype=np.uint64)), i, True)
        self.labels[i] = labels

    @staticmethod
    def _set_bit(words: np.ndarray, i: int, value: bool) -> None:
        bit = np.uint64(1 << (i & 63))
        words[i >> 6] = (words[i >> 6] | bit) if value else (words[i >> 6] & ~bit)

    def _words(self) -> int:
        return (self._used + 63) // 64

    def _ensure_kinds(self, resources: Resources) -> None:
        for kind in (k for k, _ in resources.other if k not in self.kinds):
            self.kinds.append(kind)
            rows = len(self._schedulable)
            self._capacity = np.column_stack([self._capacity, np.zeros(rows)])
            for capacity_row, allocated_row, reported_row in zip(
                    self._capacity_rows, self._allocated_rows, self._reported_rows):
                capacity_row.append(0.0)
                allocated_row.append(0.0)
                reported_row.append(np.inf)
            self._free_t = np.vstack([self._free_t, np.zeros(rows)])
            self._normalized_t = np.vstack([self._normalized_t, np.zeros(rows)])
            self._scale = np.append(self._scale, 1.0)
            self._scale_list.append(1.0)
            self._largest = np.append(self._largest, 0.0)

    def _vector(self, resources: Resources) -> np.ndarray:
        return resource_vector(resources, self.kinds)

    def _refresh_row(self, i: int) -> None:
        rows = zip(self._capacity_rows[i], self._allocated_rows[i], self._reported_rows[i], self._scale_list)
        free_t, normalized_t = self._free_t, self._normalized_t
        for kind, (capacity, allocated, reported, scale) in enumerate(rows):
            free = min(capacity - allocated, reported)
            free_t[kind, i] = free
            normalized_t[kind, i] = free / scale


def resource_vector(resources: Resources, kinds: Sequence[str]) -> np.ndarray:
    """Amounts in column order; cpu and memory are always the first two columns."""
    if not resources.other:   # the common case, on the placement hot path
        if len(kinds) == 2:
            return np.array((resources.cpu, float(resources.memory)))
        vector = np.zeros(len(kinds))
        vector[0], vector[1] = resources.cpu, resources.memory
        return vector
    amounts = resources.as_dict()
    return np.array([amounts.get(kind, 0.0) for kind in kinds], dtype=np.float64)


def _pairs(labels: Mapping[str, str]) -> list[tuple[str, str | None]]:
    return [pair for key, value in labels.items() for pair in ((key, value), (key, None))]


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def unpack_bits(words: np.ndarray, n: int) -> np.ndarray:
    return np.unpackbits(words.view(np.uint8), bitorder="little")[:n].astype(bool)
