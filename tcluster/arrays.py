"""Array jobs: task indexes in Slurm's form (`0-999`, `1,3,5-7`, `0-99:2`, `%50`) kept as
ranges, so a million-index array costs what its running and finished tasks cost, not
what its index count would.

An IndexSet is a sorted tuple of disjoint runs (first, last, step): immutable, taken
from the front as tasks are placed, split where some are cancelled. Its text form
(`0-999,1001-1999:2`) is its one codec, in the store and on the wire."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Iterator

from tcluster.errors import InvalidArgument

MAX_ARRAY_INDEX = 99_999_999          # indexes are 0..this (task ids carry them)
MAX_ARRAY_RUNS = 1_000                # runs written in one spec (the text stays small)
_RUN = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")
Run = tuple[int, int, int]            # first, last (inclusive, on the step), step


@dataclass(frozen=True)
class IndexSet:
    runs: tuple[Run, ...] = ()

    @classmethod
    def of(cls, indexes: Iterable[int]) -> IndexSet:
        return cls(_coalesce([(i, i, 1) for i in sorted(set(indexes))]))

    @classmethod
    def span(cls, count: int) -> IndexSet:
        return cls(((0, count - 1, 1),)) if count > 0 else cls()

    def __len__(self) -> int:
        return sum((last - first) // step + 1 for first, last, step in self.runs)

    def __bool__(self) -> bool:
        return bool(self.runs)

    def __contains__(self, index: object) -> bool:
        return isinstance(index, int) and any(
            first <= index <= last and (index - first) % step == 0 for first, last, step in self.runs)

    def __iter__(self) -> Iterator[int]:
        for first, last, step in self.runs:
            yield from range(first, last + 1, step)

    def union(self, other: IndexSet) -> IndexSet:
        """Both sets, which must be disjoint (unplaced and skipped indexes are)."""
        return IndexSet(_coalesce([*self.runs, *other.runs])) if other else self

    def first(self) -> int | None:
        return self.runs[0][0] if self.runs else None

    def without(self, other: IndexSet | Iterable[int]) -> IndexSet:
        """This set minus `other` (small: a placement's or a cancel's indexes)."""
        gone = other if isinstance(other, IndexSet) else IndexSet.of(other)
        if not gone or not self:
            return self
        runs: list[Run] = []
        for run in self.runs:
            runs.extend(_minus(run, gone))
        return IndexSet(_coalesce(runs))

    def take(self, n: int) -> tuple[list[int], IndexSet]:
        """The `n` smallest indexes, and the rest."""
        taken: list[int] = []
        runs = list(self.runs)
        while runs and len(taken) < n:
            first, last, step = runs[0]
            want = min(n - len(taken), (last - first) // step + 1)
            taken.extend(range(first, first + want * step, step))
            rest = first + want * step
            runs[0:1] = [(rest, last, step)] if rest <= last else []
        return taken, IndexSet(tuple(runs))

    def text(self) -> str:
        return ",".join(_run_text(r) for r in self.runs)

    def compact(self, limit: int = 8) -> str:
        """For tables: `[40-999]`, or the first runs and `+N more`."""
        if not self.runs:
            return "[]"
        shown = ",".join(_run_text(r) for r in self.runs[:limit])
        more = f",+{len(self.runs) - limit} more" if len(self.runs) > limit else ""
        return f"[{shown}{more}]"


def parse_array(text: str, field: str = "array") -> tuple[IndexSet, int]:
    """`0-999%50` -> (the indexes, 50); throttle 0: no limit. InvalidArgument names what is wrong."""
    body, _, throttle_text = text.strip().partition("%")
    throttle = 0
    if throttle_text:
        if not throttle_text.isdigit() or int(throttle_text) < 1:
            raise InvalidArgument(field, f"%{throttle_text[:20]} must be %N with N >= 1 (at most N running at once)")
        throttle = int(throttle_text)
    parts = [p.strip() for p in body.split(",")]
    if not body.strip() or len(parts) > MAX_ARRAY_RUNS:
        raise InvalidArgument(field, f"give 1 to {MAX_ARRAY_RUNS} comma-separated parts like 0-999, 1,3,5-7, 0-99:2")
    runs = [_parse_run(part, field) for part in parts]
    return IndexSet(_coalesce(_disjoint(runs, field))), throttle


def parse_index_set(text: str, field: str = "tasks") -> IndexSet:
    """The indexes a `tcl cancel --tasks 5-9,12` names (no throttle)."""
    indexes, throttle = parse_array(text, field)
    if throttle:
        raise InvalidArgument(field, "takes indexes only (no %N)")
    return indexes


def index_set_from_text(text: str) -> IndexSet:
    """The stored form (trusted: written by IndexSet.text)."""
    return parse_array(text)[0] if text else IndexSet()


def _parse_run(part: str, field: str) -> Run:
    match = _RUN.match(part)
    if match is None:
        raise InvalidArgument(field, f"{part[:40]!r} is not N, A-B or A-B:STEP (e.g. 0-999, 1,3,5-7, 0-99:2)")
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    step = int(match.group(3)) if match.group(3) is not None else 1
    if last < first or step < 1 or last > MAX_ARRAY_INDEX:
        raise InvalidArgument(field, f"{part[:40]!r}: need A <= B <= {MAX_ARRAY_INDEX} and STEP >= 1")
    return first, first + (last - first) // step * step, step


def _disjoint(runs: list[Run], field: str) -> list[Run]:
    """Runs sorted; an index given twice is refused (as Slurm does), not silently merged."""
    runs.sort()
    for (a_first, a_last, a_step), b in zip(runs, runs[1:]):
        if b[0] <= a_last and any((i - a_first) % a_step == 0 and a_first <= i <= a_last
                                  for i in range(b[0], min(a_last, b[1]) + 1, b[2])):
            raise InvalidArgument(field, f"index {b[0]}.. is given twice")
    return runs


def _minus(run: Run, gone: IndexSet) -> list[Run]:
    first, last, step = run
    out: list[Run] = []
    start = first
    for index in gone:
        if index > last:
            break
        if index < start or (index - first) % step:
            continue
        if index > start:
            out.append((start, index - step, step))
        start = index + step
    if start <= last:
        out.append((start, last, step))
    return out


def _coalesce(runs: list[Run]) -> tuple[Run, ...]:
    """Single indexes and touching runs of step 1 joined: the text stays short."""
    out: list[Run] = []
    for first, last, step in sorted(runs):
        if first == last:
            step = 1
        if out:
            p_first, p_last, p_step = out[-1]
            if p_step == 1 and step == 1 and first == p_last + 1:
                out[-1] = (p_first, last, 1)
                continue
        out.append((first, last, step))
    return tuple(out)


def _run_text(run: Run) -> str:
    first, last, step = run
    if first == last:
        return str(first)
    return f"{first}-{last}" if step == 1 else f"{first}-{last}:{step}"
