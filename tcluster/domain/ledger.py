"""The usage ledger's values: one row per finished attempt, its size bound, the hourly
roll-ups reports read, and report lines. Pure: the master's core makes the rows
(master/core/ledgerrows.py), the stores keep them (master/usage/ledgerdb.py).

A row's size is bounded: its strings are names (each at most MAX_NAME_BYTES by the
bounds every submit and registration passes, tcluster/domain/bounds.py) and a reason cut
to LEDGER_REASON_BYTES; the rest are numbers. LEDGER_ROW_BYTES is the resulting bound
on one row's payload (README, "Usage ledger"), typically ~150 bytes on disk in SQLite."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from tcluster.domain.bounds import MAX_NAME_BYTES

HOUR_S = 3600
DAY_S = 86400                          # days are UTC days: a report's whole days read their sums
LEDGER_REASON_BYTES = 160              # a row keeps the start of its reason, never more
# Numbers: 6 integers (index, attempt, exit code, memory peak, state code, job end) and 5
# reals (start, end, CPU-s, GPU-s, cores asked), 8 bytes each; strings: job id, user, queue, node
# (names) and the reason.
LEDGER_ROW_BYTES = 11 * 8 + 4 * MAX_NAME_BYTES + LEDGER_REASON_BYTES
DEFAULT_LEDGER_RETENTION_S = 400 * 86400.0
FAILED_STATES = frozenset({"FAILED", "LOST"})
REPORT_KEYS = ("user", "queue", "job")


def cut_reason(reason: str) -> str:
    """The start of a reason within LEDGER_REASON_BYTES (UTF-8, never split in a character)."""
    raw = reason.encode("utf-8", "replace")
    if len(raw) <= LEDGER_REASON_BYTES:
        return reason
    return raw[:LEDGER_REASON_BYTES].decode("utf-8", "ignore")


@dataclass(frozen=True)
class LedgerRow:
    """One attempt's end. `state` is how the attempt ended: a task state (SUCCEEDED, FAILED,
    KILLED, LOST), or PREEMPTED / REQUEUED for one stopped to run again."""
    job_id: str
    index: int
    attempt: int
    user: str
    queue: str
    node: str
    state: str
    reason: str
    exit_code: int | None
    started_at: float
    ended_at: float
    cpu_seconds: float = 0.0             # measured (cgroup CPU time)
    memory_peak_bytes: int = 0
    gpu_seconds: float = 0.0             # devices bound x wall seconds
    cpu_request: float = 0.0             # cores asked per task (allocated CPU-s = this x wall)
    job_end: bool = False                # the row of the step in which its job ended: counts the job

    @property
    def task_id(self) -> str:
        return f"{self.job_id}.{self.index}"

    @property
    def wall_seconds(self) -> float:
        return max(0.0, self.ended_at - self.started_at) if self.started_at else 0.0

    @property
    def failed(self) -> bool:
        return self.state in FAILED_STATES

    @property
    def hour(self) -> int:
        return hour_of(self.ended_at)


def hour_of(at: float) -> int:
    """The start (unix s) of the hour `at` falls in."""
    return int(at // HOUR_S) * HOUR_S


def day_of(at: float) -> int:
    return int(at // DAY_S) * DAY_S


@dataclass
class Totals:
    """What a report line sums: `jobs` counts the jobs that ended (rows marked job_end),
    so that sums over hours add up; `failures` the attempts that ended FAILED or LOST."""
    cpu_seconds: float = 0.0
    gpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    attempts: int = 0
    failures: int = 0
    jobs: int = 0

    def add_row(self, row: LedgerRow) -> None:
        self.cpu_seconds += row.cpu_seconds
        self.gpu_seconds += row.gpu_seconds
        self.wall_seconds += row.wall_seconds
        self.attempts += 1
        self.failures += row.failed
        self.jobs += row.job_end

    def add_rollup(self, r: Rollup) -> None:
        self.cpu_seconds += r.cpu_seconds
        self.gpu_seconds += r.gpu_seconds
        self.wall_seconds += r.wall_seconds
        self.attempts += r.attempts
        self.failures += r.failures
        self.jobs += r.jobs


@dataclass(frozen=True)
class Rollup:
    """One hour (or day: `hour` is then the day's start) of one user in one queue: the sums
    of the rows that ended in it."""
    hour: int
    user: str
    queue: str
    cpu_seconds: float = 0.0
    gpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    attempts: int = 0
    failures: int = 0
    jobs: int = 0

    @property
    def key(self) -> tuple[int, str, str]:
        return self.hour, self.user, self.queue

    def plus(self, other: Rollup) -> Rollup:
        return Rollup(self.hour, self.user, self.queue, self.cpu_seconds + other.cpu_seconds,
                      self.gpu_seconds + other.gpu_seconds, self.wall_seconds + other.wall_seconds,
                      self.attempts + other.attempts, self.failures + other.failures, self.jobs + other.jobs)

    def minus(self, other: Rollup) -> Rollup:
        return Rollup(self.hour, self.user, self.queue, self.cpu_seconds - other.cpu_seconds,
                      self.gpu_seconds - other.gpu_seconds, self.wall_seconds - other.wall_seconds,
                      self.attempts - other.attempts, self.failures - other.failures, self.jobs - other.jobs)


def roll_up(rows: Iterable[LedgerRow], unit: int = HOUR_S) -> dict[tuple[int, str, str], Rollup]:
    """The rows' sums per unit (hour, day) x user x queue (the unit a row's attempt ended in)."""
    sums: dict[tuple[int, str, str], Rollup] = {}
    for row in rows:
        one = Rollup(int(row.ended_at // unit) * unit, row.user, row.queue, row.cpu_seconds, row.gpu_seconds,
                     row.wall_seconds, 1, int(row.failed), int(row.job_end))
        sums[one.key] = sums[one.key].plus(one) if one.key in sums else one
    return sums


def gap(rollup: Rollup, detail: Rollup | None) -> Rollup | None:
    """What an hour's roll-up holds beyond the detail rows this master has for it (a new
    leader's local file lacks the rows another master wrote): None when nothing is missing."""
    missing = rollup if detail is None else rollup.minus(detail)
    if missing.attempts <= 0 and missing.cpu_seconds <= 1e-6 and missing.gpu_seconds <= 1e-6:
        return None
    return missing


@dataclass(frozen=True)
class ReportLine:
    key: str                  # the user, queue or job
    cpu_hours: float
    gpu_hours: float
    jobs: int
    attempts: int
    failures: int
    wall_hours: float


def report_line(key: str, totals: Totals) -> ReportLine:
    return ReportLine(key, totals.cpu_seconds / HOUR_S, totals.gpu_seconds / HOUR_S, totals.jobs, totals.attempts,
                      totals.failures, totals.wall_seconds / HOUR_S)


def whole_hours(since: float, until: float) -> tuple[int, int]:
    """[first, last) whole hours inside [since, until) (first >= last: none)."""
    first = hour_of(since) + (HOUR_S if since % HOUR_S else 0)
    last = hour_of(until)
    return first, max(first, last)


Span = tuple[float, float]


def split_period(since: float, until: float, units: tuple[int, ...] = (DAY_S, HOUR_S)) -> tuple[list[list[Span]], list[Span]]:
    """[since, until) cut into whole units, coarsest first, and what is left: for each unit
    the spans that unit's sums serve, and the spans the detail rows serve (at most an hour
    at each end). The pieces cover the period exactly once."""
    rest: list[Span] = [(since, until)] if until > since else []
    served: list[list[Span]] = []
    for unit in units:
        whole: list[Span] = []
        left: list[Span] = []
        for a, b in rest:
            first, last = -(-a // unit) * unit, (b // unit) * unit
            if first < last:
                whole.append((first, last))
                left += [(x, y) for x, y in ((a, first), (last, b)) if y > x]
            else:
                left.append((a, b))
        served.append(whole)
        rest = left
    return served, rest
