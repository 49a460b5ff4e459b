"""Shared arithmetic of the DRF family: per-task shares, normalized demands, and the
saturation index that blocks jobs once no node has room for them.

Shares are against `capacity`, the total of READY nodes. A kind the cluster has none of
is left out (as in Resources.dominant_share): a task asking for it fits nowhere anyway,
and the loop skips it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tcluster.domain.resources import Resources
from tcluster.scheduler.views import JobView

EPSILON = 1e-9   # the slack Resources.fits_in allows


@dataclass(frozen=True)
class Shape:
    """One task of a job, seen against the cluster: per-kind shares of the total, the
    dominant share mu = max of those, and the normalized demand s = shares / mu."""
    shares: tuple[float, ...]
    mu: float

    @property
    def normalized(self) -> tuple[float, ...]:
        if self.mu <= 0:
            return tuple(0.0 for _ in self.shares)
        return tuple(x / self.mu for x in self.shares)


@dataclass(frozen=True)
class Axes:
    """The resource kinds the cluster has, in a fixed order, and their totals."""
    kinds: tuple[str, ...]
    totals: tuple[float, ...]

    @classmethod
    def of(cls, capacity: Resources) -> Axes:
        pairs = [(k, v) for k, v in capacity.as_dict().items() if v > 0]
        return cls(tuple(k for k, _ in pairs), tuple(v for _, v in pairs))

    def shape(self, demand: Resources) -> Shape:
        amounts = demand.as_dict()
        shares = tuple(amounts.get(k, 0.0) / total for k, total in zip(self.kinds, self.totals))
        return Shape(shares, max(shares, default=0.0))


def share_key(value: float) -> float:
    """Weighted shares compare after rounding to 12 decimals. Equal shares are then
    equal in every policy, whatever order the arithmetic ran in (2/3 x 0.3 vs 0.2), so
    the tie-break, not the last bit of a float, decides.

    The value is round(value, 12)'s, in a third of its time (it formats and parses a
    decimal string; the policies round once or more per decision). round(value, 12) is
    the double nearest N / 10**12, N the integer nearest value x 10**12. Here the float
    product y has an error under |y| x 2**-53 < 0.12 while |y| < 10**15, so when y is more
    than 0.375 from a half, round(y) is that N; N < 2**53 is exact, and one IEEE division
    by 10**12 (exact too) gives the double nearest N / 10**12. Near a half, or beyond the
    range, it asks round() itself. Only a zero's sign may differ (-1e-20 gives 0.0, not
    -0.0): equal keys either way. The bounds are literals: a named constant costs a lookup
    a call, and drf and mch call this once or more a decision."""
    scaled = value * 1e12   # 10**12: exact in binary
    if -1e15 < scaled < 1e15:   # here the product's error is under 0.12
        whole = round(scaled)
        if -0.375 < scaled - whole < 0.375:   # further than this from a half, that error cannot move the rounding
            return whole / 1e12
    return round(value, 12)


def tie_key(job: JobView) -> tuple[float, str]:
    """Equal weighted shares go to the older job, then the smaller id: deterministic."""
    return (job.submitted_at, job.job_id)


class SaturationIndex:
    """Finds the jobs a shrinking `largest free` blocks, without scanning every job.

    Within a round free space only shrinks, so per kind the jobs sorted by demand
    (largest first) are cut from the front: O(log p) amortized per blocked job."""

    def __init__(self, jobs: Sequence[JobView]) -> None:
        kinds = sorted({k for j in jobs for k, v in j.demand.as_dict().items() if v > 0})
        self._sorted = {
            kind: sorted(((j.demand.get(kind), j.job_id) for j in jobs if j.demand.get(kind) > 0), reverse=True)
            for kind in kinds
        }
        self._cursor = dict.fromkeys(kinds, 0)

    def limit(self, largest_free: Resources) -> list[str]:
        """Jobs whose task asks for more of some kind than any node has free now."""
        blocked = []
        free = largest_free.as_dict()
        for kind, entries in self._sorted.items():
            room = free.get(kind, 0.0) + EPSILON
            i = self._cursor[kind]
            while i < len(entries) and entries[i][0] > room:
                blocked.append(entries[i][1])
                i += 1
            self._cursor[kind] = i
        return blocked
