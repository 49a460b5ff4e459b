"""The usage samples of one heartbeat, kept as they came and read as columns (issues 10, 11).

A heartbeat carries one sample per running task. Converting each into a `TaskUsage`
field by field was half of the master's own cost per heartbeat, and the recorder then
read 13 figures back off every object. A `UsageBlock` keeps the decoded samples as they
are (protobuf messages from the wire; opaque here, only their field names are used, so
`_pb2` stays in master/edge/agent_codec.py) with their task ids and attempts. The state keeps a
reference to the block per task (`UsageIndex`); a `TaskUsage` is built (by the block's
`to_usage`, i.e. `usage_from_pb`) only when someone reads one task's usage. The
figures the usage history needs are read once, at the decode, into one float64 array
(`raw`: one attrgetter call per sample, the working set computed there), so the
recorder's drain is array operations only (and history on costs the heartbeat path
nothing it would not pay with history off)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import attrgetter
from typing import Any

import numpy as np

from tcluster.domain.taskusage import NOT_SENT, RATES, TaskUsage, working_set

# The figures of a sample the usage history reads (master/usage/ingest.py), in `UsageBlock.raw`'s
# order: the agent's rates, the levels, the counters (for the rates an older agent did not
# send) and whether the rates were sent (1.0 or 0.0).
RAW_FIELDS = ("cpu_rate", "cpu_system_rate", "cpu_throttled_rate", "memory_bytes", "working_set_bytes",
              "memory_file_bytes", "memory_anon_bytes", "memory_swap_bytes", "pids", "io_read_rate",
              "io_write_rate", "oom_kills", "sampled_at", "cpu_throttled_seconds", "io_read_bytes",
              "io_write_bytes", "rates_derived")
INACTIVE = "memory_inactive_file_bytes"   # optional on the wire: unset reads 0, the domain says -1
_WS = RAW_FIELDS.index("working_set_bytes")
# Read off each sample: the working set's slot holds the inactive figure until the working set replaces it
_RAW = attrgetter(*(INACTIVE if name == "working_set_bytes" else name for name in RAW_FIELDS))
_MEM, _FILE, _SENT = map(RAW_FIELDS.index, ("memory_bytes", "memory_file_bytes", "rates_derived"))
_RATES = tuple(map(RAW_FIELDS.index, RATES))


def _same(usage: TaskUsage) -> TaskUsage:
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
    raw: np.ndarray                   # (n, len(RAW_FIELDS)) float64: float() of each TaskUsage's figures
    to_usage: Callable[[Any], TaskUsage] = _same
    unset: Callable[[Any], bool] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def usage(self, row: int) -> TaskUsage:
        return self.to_usage(self.samples[row])

    def row_of(self, task_id: str) -> int:
        """The row of a task of this block. The index is made on the first read: a beat
        only files the block under its tasks (no per-row object on the hot path)."""
        rows: dict[str, int] | None = self.__dict__.get("_rows")
        if rows is None:
            rows = dict(zip(self.ids, range(len(self.ids))))
            object.__setattr__(self, "_rows", rows)    # a cache, not a field
        return rows[task_id]

    def take(self, rows: list[int]) -> UsageBlock:
        """The block of these rows only (a heartbeat's samples the master did not keep)."""
        return UsageBlock(tuple(self.ids[i] for i in rows), tuple(self.attempts[i] for i in rows),
                          [self.samples[i] for i in rows], self.raw[rows], self.to_usage, self.unset)

    @staticmethod
    def of(samples: Mapping[str, tuple[int, TaskUsage]]) -> UsageBlock:
        """From domain values (tests, benches, in-process callers): task id -> (attempt, usage)."""
        usages = [u for _, u in samples.values()]
        return UsageBlock(tuple(samples), tuple(a for a, _ in samples.values()), usages, figures(usages, None))


def figures(samples: Sequence[Any], unset: Callable[[Any], bool] | None) -> np.ndarray:
    """(n, len(RAW_FIELDS)) float64: float() of each sample's RAW figures as its TaskUsage
    holds them. One attrgetter call per sample and per working set, two numpy calls per
    block (a heartbeat holds a few samples: numpy's fixed cost per call would outweigh
    them); the inactive figure is asked again only where it reads 0, the rates only where
    they were not sent (both rare)."""
    width = len(RAW_FIELDS)
    flat = list(chain.from_iterable(map(_RAW, samples)))
    inactive = flat[_WS::width]
    if unset is not None and 0 in inactive:
        for row, value in enumerate(inactive):
            if value == 0 and unset(samples[row]):
                inactive[row] = NOT_SENT          # an agent that does not read it
    flat[_WS::width] = list(map(working_set, flat[_MEM::width], inactive, flat[_FILE::width]))
    if 0 in flat[_SENT::width]:                   # samples of an agent of the previous version
        for row, sent in enumerate(flat[_SENT::width]):
            if not sent:
                for column in _RATES:
                    flat[row * width + column] = NOT_SENT
    raw = np.array(flat, dtype=np.float64).reshape(len(samples), width)
    raw.flags.writeable = False          # shared by the state and the recorder's drains
    return raw


EMPTY = UsageBlock((), (), (), figures((), None))


class UsageIndex(MutableMapping[str, TaskUsage]):
    """Task id -> the block of its newest sample: a heartbeat's samples go in by
    reference (`put`). Reading a task builds its TaskUsage once per sample: the same
    sample reads as the same object (the API's caches compare by identity)."""

    def __init__(self) -> None:
        self._at: dict[str, UsageBlock] = {}
        self._built: dict[str, tuple[UsageBlock, TaskUsage]] = {}

    def put(self, block: UsageBlock) -> None:
        """Every row of `block` becomes its task's newest sample: one dict update, no
        per-sample Python nor object."""
        self._at.update(zip(block.ids, repeat(block)))

    def where(self, task_id: str) -> tuple[UsageBlock, int] | None:
        block = self._at.get(task_id)
        return (block, block.row_of(task_id)) if block is not None else None

    def __getitem__(self, task_id: str) -> TaskUsage:
        block = self._at[task_id]
        built = self._built.get(task_id)
        if built is not None and built[0] is block:     # a block holds a task once: same block, same sample
            return built[1]
        usage = block.usage(block.row_of(task_id))
        self._built[task_id] = (block, usage)
        return usage

    def __setitem__(self, task_id: str, usage: TaskUsage) -> None:
        """A single domain value (tests, benches): a one-row block, read back as itself."""
        block = UsageBlock.of({task_id: (0, usage)})
        self._at[task_id] = block
        self._built[task_id] = (block, usage)

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
