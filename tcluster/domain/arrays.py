"""Array jobs: task indexes in Slurm's form (`0-999`, `1,3,5-7`, `0-99:2`, `%50`) kept as
ranges, so a million-index array costs what its running and finished tasks cost, not
what its index count would.

An IndexSet is a sorted tuple of disjoint runs (first, last, step): immutable, taken
from the front as tasks are placed, split where some are cancelled. Its text form
(`0-999,1001-1999:2`) is its one codec, in the store and on the wire."""

from __future__ import annotations

import bisect
import itertools
import math
import re
from dataclasses import dataclass
from typing import Iterable, Iterator

from tcluster.domain.errors import InvalidArgument

MAX_ARRAY_INDEX = 99_999_999          # indexes are 0..this (task ids carry them)
MAX_THROTTLE = MAX_ARRAY_INDEX + 1    # %N: more could not run at once (and it fits int32)
MAX_ARRAY_RUNS = 1_000                # runs written in one spec (the text stays small)
MAX_STEPPED_CANCEL = 100_000          # indexes a `--tasks` spec may name in stepped runs
_MAX_RESIDUE_RUNS = 64                # a sparser cut leaves k-1 residue runs up to this k
_RUN = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")
Run = tuple[int, int, int]            # first, last (inclusive, on the step), step
# The most runs an array's unplaced or skipped indexes are kept in: its text stays under
# ~120 KB each, so a job's record and its replies stay bounded whatever cancels cut it.
MAX_INDEX_RUNS = 4096

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
        # A plain loop, not any() over a generator: a Place asks this once per index it takes.
        if not isinstance(index, int):
            return False
        for first, last, step in self.runs:
            if index < first:
                break          # runs are sorted by their first index (their spans may interleave)
            if index <= last and (index - first) % step == 0:
                return True
        return False

    def __iter__(self) -> Iterator[int]:
        for first, last, step in self.runs:
            yield from range(first, last + 1, step)

    def union(self, other: IndexSet) -> IndexSet:
        """Both sets, which must be disjoint (unplaced and skipped indexes are)."""
        return IndexSet(_coalesce([*self.runs, *other.runs])) if other else self

    def first(self) -> int | None:
        return self.runs[0][0] if self.runs else None

    def without(self, other: IndexSet | Iterable[int]) -> IndexSet:
        """This set minus `other`, by arithmetic on the runs: the work grows with the runs,
        not with the indexes they hold (`0-99999999` minus `5-9` is two runs)."""
        gone = other if isinstance(other, IndexSet) else IndexSet.of(other)
        if not gone or not self:
            return self
        near = _Overlaps(gone.runs)
        runs: list[Run] = []
        for run in self.runs:
            cuts = [c for g in near.of(run) if (c := _meet(run, g)) is not None]
            runs.extend(_run_minus(run, cuts) if cuts else (run,))
        return IndexSet(_coalesce(runs))

    def intersection(self, other: IndexSet) -> IndexSet:
        """The indexes in both (each pair of overlapping runs meets in one run)."""
        if not other or not self:
            return IndexSet()
        near = _Overlaps(other.runs)
        met = [c for run in self.runs for g in near.of(run) if (c := _meet(run, g)) is not None]
        return IndexSet(_coalesce(met))

    def stepped_count(self) -> int:
        """Indexes held in runs of step > 1: what removing this set may cost one by one."""
        return sum((last - first) // step + 1 for first, last, step in self.runs if step > 1)

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
        if not throttle_text.isdigit() or len(throttle_text) > 12 or not 1 <= int(throttle_text) <= MAX_THROTTLE:
            raise InvalidArgument(field, f"%{throttle_text[:20]} must be %N with N in 1..{MAX_THROTTLE:,} (at most N "
                                         "running at once)")
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
    if indexes.stepped_count() > MAX_STEPPED_CANCEL:
        # A stepped run cut out of a plain one leaves one piece per index it names.
        raise InvalidArgument(field, f"stepped runs (A-B:STEP) may name at most {MAX_STEPPED_CANCEL:,} "
                                     f"indexes in all; cancel in several steps or give plain ranges A-B")
    return indexes


def index_set_from_text(text: str) -> IndexSet:
    """The stored or wire form (trusted: written by IndexSet.text, whose runs may interleave:
    the odd indexes cancelled from a plain range leave `0-98:2`, skipped `1-99:2`)."""
    if not text:
        return IndexSet()
    return IndexSet(tuple(sorted(_parse_run(part, "indexes") for part in text.split(","))))


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
    """Runs sorted; runs whose spans overlap are refused (an index given twice is refused as
    Slurm does, not silently merged), checked in one pass over the sorted runs."""
    runs.sort()
    for before, run in zip(runs, runs[1:]):
        if run[0] <= before[1]:
            raise InvalidArgument(field, f"runs must not overlap: {_run_text(run)!r} starts inside "
                                         f"{_run_text(before)!r} (give each index once, runs in any order)")
    return runs


class _Overlaps:
    """The runs of a set that overlap a span, found by bisection: runs are sorted by their
    first index and `reach[j]` is the furthest any of runs[:j+1] goes (spans may interleave)."""

    def __init__(self, runs: tuple[Run, ...]) -> None:
        self.runs = runs
        self.reach = list(itertools.accumulate((last for _, last, _ in runs), max))

    def of(self, span: Run) -> Iterator[Run]:
        j = bisect.bisect_left(self.reach, span[0])
        while j < len(self.runs) and self.runs[j][0] <= span[1]:
            if self.runs[j][1] >= span[0]:
                yield self.runs[j]
            j += 1


def _meet(a: Run, b: Run) -> Run | None:
    """Two runs' common indexes: one run whose step is the lcm of theirs (Chinese remainder)."""
    (a_first, a_last, a_step), (b_first, b_last, b_step) = a, b
    g = math.gcd(a_step, b_step)
    if (b_first - a_first) % g:
        return None
    t = (b_first - a_first) // g * pow(a_step // g, -1, b_step // g) % (b_step // g)
    step = a_step // g * b_step
    low, high = max(a_first, b_first), min(a_last, b_last)
    first = low + (a_first + a_step * t - low) % step
    return (first, first + (high - first) // step * step, step) if first <= high else None


def _run_minus(run: Run, cuts: list[Run]) -> list[Run]:
    """A run less some of its own sub-runs (each cut lies in it, its step a multiple of the run's)."""
    step = run[2]
    pieces = _cut_out(run, sorted(c for c in cuts if c[2] == step))
    for cut in (c for c in cuts if c[2] != step):
        pieces = [p for piece in pieces for p in _minus_stepped(piece, cut)]
    return pieces


def _cut_out(run: Run, cuts: list[Run]) -> list[Run]:
    """`run` less contiguous sub-runs (sorted by first): the pieces between them."""
    first, last, step = run
    out: list[Run] = []
    start = first
    for c_first, c_last, _ in cuts:
        if c_first > start:
            out.append((start, c_first - step, step))
        start = max(start, c_last + step)
    if start <= last:
        out.append((start, last, step))
    return out


def _minus_stepped(piece: Run, cut: Run) -> list[Run]:
    """A piece less a sparser run: the parts before and after it and, between its indexes,
    either the other residues (k-1 runs for a step k times the piece's) or the gaps (one per
    index of the cut: parse_index_set bounds how many a user may name)."""
    met = _meet(piece, cut)
    if met is None:
        return [piece]
    (first, last, step), (m_first, m_last, m_step) = piece, met
    out = [(first, m_first - step, step)] if m_first > first else []
    k = m_step // step
    if 1 < k <= _MAX_RESIDUE_RUNS:
        for r in range(1, k):
            start = m_first + r * step
            if start < m_last:
                out.append((start, start + (m_last - start) // m_step * m_step, m_step))
    elif k > _MAX_RESIDUE_RUNS:
        out.extend((i + step, i + m_step - step, step) for i in range(m_first, m_last, m_step))
    if m_last < last:
        out.append((m_last + step, last, step))
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
