"""Bounded usage history: per task, per node, per queue and for the whole cluster.

Sans-IO: plain data structures fed from the master's applied steps; `historydb` persists
them in batches. Every series keeps two tiers of fixed-size rings:

- recent: one bucket per heartbeat interval, for `recent_s` (default 10 min);
- long:   one bucket per `long_step_s` (default 5 min), for `long_s` (default 24 h).

A bucket holds the mean of the rates (CPU, I/O: a counter's mean rate over the bucket)
and the maximum of the levels (memory, pids: what a limit or the OOM killer sees). Values
are stored as bfloat16 (the upper half of a float32: 8-bit exponent, 3 significant
digits), so a 1 GiB figure is kept to within 0.4% in 2 bytes. That, and implicit bucket
times, is what keeps a task's full retention near 18 KiB (`bench/dashboard.py`).

Windows are relative to a series' newest bucket, so a finished task's history stays
readable (from the database) for as long as its job is retained."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from operator import add
from typing import Any, Sequence

import numpy as np

from tcluster.domain.taskusage import HISTORY_COLUMNS, MAX, MEAN

NAN_BF16 = 0x7FC0


@dataclass(frozen=True)
class Schema:
    fields: tuple[str, ...]
    aggs: tuple[int, ...]          # MEAN or MAX, per field

    def index(self, name: str) -> int:
        return self.fields.index(name)


TASK = Schema(*zip(*((f.column.name, f.column.agg) for f in HISTORY_COLUMNS if f.column)))
NODE = Schema(
    ("cpu_used", "memory_used", "cpu_allocated", "memory_allocated", "cpu_capacity", "memory_capacity", "tasks"),
    (MEAN, MAX, MAX, MAX, MAX, MAX, MAX))
QUEUE = Schema(("dominant_share", "guaranteed_share", "cpu_used", "memory_used", "running_tasks"),
               (MEAN, MAX, MEAN, MAX, MAX))
# A GPU task's devices, per bucket (NVML through the heartbeats, master/usage/recorder.py):
# their mean utilization (%), the memory used on them and their memory (summed), how many.
GPU = Schema(("gpu_util", "gpu_memory_used", "gpu_memory_total", "gpus"), (MEAN, MAX, MAX, MAX))
CLUSTER = Schema(
    ("cpu_capacity", "cpu_allocated", "cpu_used", "memory_capacity", "memory_allocated", "memory_used",
     "running_tasks", "pending_tasks"),
    (MAX, MAX, MEAN, MAX, MAX, MAX, MAX, MAX))


@dataclass(frozen=True)
class HistoryConfig:
    step_s: float = 1.0            # the heartbeat interval: the recent tier's resolution
    recent_s: float = 600.0
    long_step_s: float = 300.0
    long_s: float = 86400.0

    def tiers(self) -> list[tuple[float, int]]:
        """(bucket seconds, buckets) per tier."""
        return [(self.step_s, max(2, math.ceil(self.recent_s / self.step_s))),
                (self.long_step_s, max(2, math.ceil(self.long_s / self.long_step_s)))]


def to_bf16(values: np.ndarray) -> np.ndarray:
    """float -> bfloat16 bits, rounded to nearest even (NaN stays NaN). In uint32 and in
    place (a drain converts every sample): only negative NaNs with a mantissa above
    0x7F8000 could wrap, and no figure here is negative."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    out = bits >> 16
    out &= 1
    out += 0x7FFF
    out += bits
    out >>= 16
    return out.astype(np.uint16)


def from_bf16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


# Bucket rows waiting for their bfloat16 conversion: one numpy call per drain instead of
# one per sample (a small-array numpy call costs more than all the Python around it).
_STAGED: dict[int, list[tuple[np.ndarray, int, list[float]]]] = {}


def settle() -> None:
    """Writes every staged bucket row."""
    for width in list(_STAGED):
        staged = _STAGED.pop(width)
        bits = to_bf16(np.array([row for _, _, row in staged], dtype=np.float32))
        for (data, pos, _), row in zip(staged, bits):
            data[pos] = row


class Tier:
    """A ring of `size` buckets of `step` seconds; bucket b lives at row b % size. The newest
    bucket is kept as Python sums/maxima and written when it closes or is read."""

    __slots__ = ("step", "size", "data", "last", "sums", "maxs", "count", "flushed", "aggs", "staged")

    def __init__(self, step: float, size: int, schema: Schema) -> None:
        self.step, self.size, self.aggs = step, size, schema.aggs
        self.data = np.full((size, len(schema.fields)), NAN_BF16, dtype=np.uint16)
        self.last = -1                 # the newest bucket (absolute number); -1: empty
        self.sums: list[float] = []    # the newest bucket's sums and maxima, per field
        self.maxs: list[float] = []
        self.count = 0
        self.flushed = -1              # buckets up to this one are on disk (it may change again)
        self.staged = True             # the newest bucket's row is written (or staged) as it is now

    def add(self, t: float, values: list[float]) -> None:
        b = int(t // self.step)
        if b < self.last:
            return                     # late: its bucket is already closed
        if b == self.last and self.count:
            self.count += 1            # map over two lists: the per-sample cost is the point here
            self.sums = list(map(add, self.sums, values))
            self.maxs = list(map(max, self.maxs, values))
            self.staged = False
            return
        self.stage_open()
        if self.last >= 0 and b - self.last > 1:
            settle()                   # before the gap is cleared: nothing staged may land in it
            self._clear_between(self.last, b)
        self.last, self.count, self.sums, self.maxs, self.staged = b, 1, values, values, False

    def stage_open(self) -> None:
        if self.count and not self.staged:
            n = self.count
            row = self.sums if n == 1 else [s / n if agg == MEAN else m
                                            for s, m, agg in zip(self.sums, self.maxs, self.aggs)]
            _STAGED.setdefault(len(row), []).append((self.data, self.last % self.size, row))
            self.staged = True

    def _clear_between(self, last: int, b: int) -> None:
        """Buckets nobody reported (a node down, a restart) become gaps."""
        if last < 0:
            return
        if b - last > self.size:
            self.data[:] = NAN_BF16
        elif b - last > 1:
            rows = np.arange(last + 1, b) % self.size
            self.data[rows] = NAN_BF16

    def put_rows(self, first: int, rows: np.ndarray) -> None:
        """Restores buckets first.. from disk (a later chunk overwrites an earlier one)."""
        self.stage_open()
        settle()
        end = first + len(rows) - 1
        if end > self.last:
            self._clear_between(self.last, first)
            self.last, self.count, self.sums, self.maxs = end, 0, [], []
        keep = [i for i in range(len(rows)) if first + i > self.last - self.size]
        for i in keep:
            self.data[(first + i) % self.size] = rows[i]
        self.flushed = max(self.flushed, end)

    def unflushed(self, settled: bool = False) -> tuple[int, np.ndarray] | None:
        """(first bucket, rows) not yet on disk; the newest flushed bucket is resent since it
        may have grown. `settled`: the caller staged and settled every open bucket already."""
        if self.last < 0 or self.last < self.flushed:
            return None
        if not settled:
            self.stage_open()
            settle()
        first = max(self.flushed, self.last - self.size + 1, 0)
        rows = self.data[np.arange(first, self.last + 1) % self.size].copy()
        return first, rows

    def read(self, since: float, until: float) -> tuple[np.ndarray, np.ndarray]:
        """(bucket start times, float32 rows) within [since, until], empty buckets dropped."""
        self.stage_open()
        settle()
        if self.last < 0:
            return np.empty(0), np.empty((0, self.data.shape[1]), dtype=np.float32)
        lo = max(self.last - self.size + 1, math.floor(since / self.step), 0)
        hi = min(self.last, math.floor(until / self.step))
        if hi < lo:
            return np.empty(0), np.empty((0, self.data.shape[1]), dtype=np.float32)
        index = np.arange(lo, hi + 1)
        rows = from_bf16(self.data[index % self.size])
        present = ~np.isnan(rows).all(axis=1)
        return index[present] * self.step, rows[present]

    @property
    def newest_time(self) -> float:
        return (self.last + 1) * self.step if self.last >= 0 else 0.0

    def nbytes(self) -> int:
        return self.data.nbytes


class Series:
    """One thing's usage over time in every tier."""

    __slots__ = ("schema", "tiers", "dirty")

    def __init__(self, schema: Schema, config: HistoryConfig) -> None:
        self.schema = schema
        self.tiers = [Tier(step, size, schema) for step, size in config.tiers()]
        self.dirty = False

    def add(self, t: float, values: list[float]) -> None:
        """`values` is kept (not copied): callers hand over a fresh list."""
        for tier in self.tiers:
            tier.add(t, values)
        self.dirty = True

    def newest(self) -> float:
        return max(tier.newest_time for tier in self.tiers)

    def read(self, since: float, until: float, fields: Sequence[str] | None = None) -> dict[str, object]:
        return read_tiers(self.schema, self.tiers, since, until, fields)


def read_tiers(schema: Schema, tiers: Sequence[Any], since: float, until: float,
               fields: Sequence[str] | None = None) -> dict[str, object]:
    """{"t": [...], field: [...]} over [since, until]: the recent tier where it has data,
    the coarser tiers before that (so a 24 h view ends in heartbeat detail)."""
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    cutoff, finest = until + 1.0, 0.0
    window_start = until + 1.0      # where the finer tier's ring begins: older data is only coarse
    for tier in tiers:
        times, rows = tier.read(since, until)
        # a coarse bucket that overlaps finer data is left out, unless it is older than
        # anything the finer ring can hold
        keep = (times + tier.step <= cutoff) | (times < window_start) if parts else times <= until
        if keep.any():
            parts.append((times[keep], rows[keep]))
            finest = finest or tier.step
            cutoff = min(cutoff, float(times[keep][0]))
        if tier.last >= 0:
            window_start = min(window_start, (tier.last - tier.size + 1) * tier.step)
    parts.reverse()
    times = np.concatenate([p[0] for p in parts]) if parts else np.empty(0)
    rows = np.concatenate([p[1] for p in parts]) if parts else np.empty((0, len(schema.fields)))
    out: dict[str, object] = {"step_s": finest or tiers[0].step, "t": np.round(times, 3).tolist()}
    for name in fields or schema.fields:
        column = rows[:, schema.index(name)]
        values = column.tolist()
        out[name] = [None if v != v else v for v in values] if np.isnan(column).any() else values
    return out


@dataclass
class TaskRecord:
    """A task's series plus what turns its counters into rates and its OOM kills into events."""
    job_id: str
    node: str = ""
    queue: str = ""
    attempt: int = 0
    series: Series | None = None
    prev: tuple[float, float, float, float] | None = None   # (t, throttled s, read B, written B)
    oom_seen: int = 0
    ooms: list[tuple[float, int, str]] = field(default_factory=list)    # (time, kills, node)
    peak: float = 0.0
    ended: bool = False
    slot: int = -1             # its row in the recorder's TaskRings; -1: read back from disk
    gpu: Series | None = None  # its GPUs' series (GPU schema), where NVML reported any
