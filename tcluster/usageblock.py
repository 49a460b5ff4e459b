"""The usage samples of one heartbeat, kept as they came and read as columns (issues 10, 11).

A heartbeat carries one sample per running task. Converting each into a `TaskUsage`
field by field was half of the master's own cost per heartbeat, and the recorder then
read 13 figures back off every object. A `UsageBlock` keeps the decoded samples as they
are (protobuf messages from the wire; opaque here, only their field names are used, so
`_pb2` stays in tcluster/wire.py) with their task ids and attempts. The state keeps a
reference to the block per task (`UsageIndex`); a `TaskUsage` is built (by the block's
`to_usage`, i.e. `usage_from_pb`) only when someone reads one task's usage, and the
recorder reads the figures it needs for a whole drain as one array (`figures`)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import attrgetter
from typing import Any

import numpy as np

from tcluster.model import TaskUsage

INACTIVE = "memory_inactive_file_bytes"   # optional on the wire: unset reads 0, the domain says -1


def _same(usage: Any) -> TaskUsage:
    return usage


@dataclass(frozen=True, eq=False)
class UsageBlock:
    """Samples of one heartbeat: `samples[i]` is task `ids[i]`'s attempt `attempts[i]`,
    each task at most once. A sample has TaskUsage's field names (a TaskUsage itself, or
    the wire message); `to_usage` makes the domain value of one, and `unset(sample)` says
    whether its inactive-file figure was left out (None: never, the value is the domain's)."""
    ids: tuple[str, ...]
    attempts: tuple[int, ...]
    samples: Sequence[Any]
    to_usage: Callable[[Any], TaskUsage] = _same
    unset: Callable[[Any], bool] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def usage(self, row: int) -> TaskUsage:
        return self.to_usage(self.samples[row])

    def take(self, rows: list[int]) -> UsageBlock:
        """The block of these rows only (a heartbeat's samples the master did not keep)."""
        return UsageBlock(tuple(self.ids[i] for i in rows), tuple(self.attempts[i] for i in rows),
                          [self.samples[i] for i in rows], self.to_usage, self.unset)

    def cpu_and_working_set(self, row: int) -> tuple[float, float]:
        """`(u.cpu_rate, u.working_set_bytes)` of the row's TaskUsage u, without building it."""
        sample = self.samples[row]
        inactive = sample.memory_inactive_file_bytes
        if inactive == 0 and self.unset is not None and self.unset(sample):
            inactive = -1
        memory = sample.memory_bytes
        return sample.cpu_rate, max(0, memory - (inactive if inactive >= 0 else sample.memory_file_bytes))

    @staticmethod
    def of(samples: Mapping[str, tuple[int, TaskUsage]]) -> UsageBlock:
        """From domain values (tests, benches, in-process callers): task id -> (attempt, usage)."""
        return UsageBlock(tuple(samples), tuple(a for a, _ in samples.values()), [u for _, u in samples.values()])


EMPTY = UsageBlock((), (), ())


def figures(blocks: Sequence[UsageBlock], names: tuple[str, ...]) -> np.ndarray:
    """(n, len(names)) float64: the named fields of every sample of the blocks, in order,
    each as float() of what the TaskUsage would hold. One attrgetter call per sample (all
    blocks chained); the inactive figure is looked at again only where it reads 0."""
    n, width = sum(len(b) for b in blocks), len(names)
    flat = np.fromiter(chain.from_iterable(map(attrgetter(*names), chain.from_iterable(b.samples for b in blocks))),
                       np.float64, n * width)
    out = flat.reshape(n, width)
    if INACTIVE in names:
        col = names.index(INACTIVE)
        zero = np.flatnonzero(out[:, col] == 0)
        if len(zero):
            _mark_unset(blocks, out, col, zero.tolist())
    return out


def _mark_unset(blocks: Sequence[UsageBlock], out: np.ndarray, col: int, rows: list[int]) -> None:
    starts = np.cumsum([0] + [len(b) for b in blocks]).tolist()
    for row in rows:
        b = bisect_right(starts, row) - 1
        block = blocks[b]
        if block.unset is not None and block.unset(block.samples[row - starts[b]]):
            out[row, col] = -1.0     # an agent that does not read it


class UsageIndex(MutableMapping[str, TaskUsage]):
    """Task id -> its newest sample, as (block, row): a heartbeat's samples go in by
    reference (`put`). Reading a task builds its TaskUsage once per sample: the same
    sample reads as the same object (the API's caches compare by identity)."""

    def __init__(self) -> None:
        self._at: dict[str, tuple[UsageBlock, int]] = {}
        self._built: dict[str, tuple[tuple[UsageBlock, int], TaskUsage]] = {}

    def put(self, block: UsageBlock) -> None:
        """Every row of `block` becomes its task's newest sample: one dict update, no
        per-sample Python."""
        self._at.update(zip(block.ids, zip(repeat(block), range(len(block.ids)))))

    def where(self, task_id: str) -> tuple[UsageBlock, int] | None:
        return self._at.get(task_id)

    def cpu_and_working_set(self, task_id: str) -> tuple[float, float] | None:
        """What the cluster sample sums, every second, without building a TaskUsage."""
        at = self._at.get(task_id)
        return at[0].cpu_and_working_set(at[1]) if at is not None else None

    def __getitem__(self, task_id: str) -> TaskUsage:
        at = self._at[task_id]
        built = self._built.get(task_id)
        if built is not None and built[0] is at:
            return built[1]
        usage = at[0].usage(at[1])
        self._built[task_id] = (at, usage)
        return usage

    def __setitem__(self, task_id: str, usage: TaskUsage) -> None:
        """A single domain value (tests, benches): a one-row block, read back as itself."""
        at = (UsageBlock((task_id,), (0,), (usage,)), 0)
        self._at[task_id] = at
        self._built[task_id] = (at, usage)

    def __delitem__(self, task_id: str) -> None:
        del self._at[task_id]
        self._built.pop(task_id, None)

    def discard(self, task_id: str) -> None:
        """Hot on every task end: without MutableMapping.pop's read (and build) of the value."""
        self._at.pop(task_id, None)
        self._built.pop(task_id, None)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._at

    def __iter__(self) -> Iterator[str]:
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._at)
