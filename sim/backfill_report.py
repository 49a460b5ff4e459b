"""What `tcl sim --backfill-compare` prints: one scenario run without and with backfill
(README, "Backfill"), side by side.

- Utilization: CPU-seconds the tasks held over the cluster's CPU x the run's span (from
  0 to the last task's end), so idle reserved room counts against it.
- Wait: a job's first task start minus its submit time, over the jobs that started;
  p50 and p99 over all of them, and over the jobs that held a reservation (gangs, starving
  jobs) on their own: backfill must not make theirs worse.
- After estimate: reserved jobs that started later than the earliest start estimate
  known while they held room (backfill's promise: 0, when tasks end by their limits).
- Backfilled: jobs that started on a reservation's room.

The baseline "off" is strict reservation (the held room idles until the held job fits,
as Slurm's sched/builtin); "on" adds the backfill rule of Slurm's sched/backfill (start
only if the time limit ends before the reservation's estimate) to the reservations
tcluster holds: one gang at a time and each starving job's node, nearer Slurm's EASY
backfill (a reservation for the blocked head) than its conservative mode (one for every
queued job)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from tcluster.domain.resources import CPU
from tcluster.sim.engine import SimRun
from tcluster.sim.jobs import JobTrack
from tcluster.views.formats import format_table


@dataclass(frozen=True)
class BackfillSummary:
    system: str
    span_s: float
    utilization: float            # of CPU over the span
    jobs_started: int
    wait_p50_s: float | None
    wait_p99_s: float | None
    reserved_jobs: int
    reserved_wait_p50_s: float | None
    reserved_wait_max_s: float | None
    after_estimate: int           # reserved jobs that started after an estimate backfill acted on (must be 0)
    backfilled: int
    tasks_done: int


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summarize(system: str, run: SimRun) -> BackfillSummary:
    span = max([r.end if r.end is not None else run.end for t in run.tracks for r in t.runs], default=0.0)
    cpu = run.capacity.get(CPU)
    held = sum(((r.end if r.end is not None else run.end) - r.start) * t.spec.resources.get(CPU)
               for t in run.tracks for r in t.runs)
    started = [t for t in run.tracks if t.runs]
    waits = [min(r.start for r in t.runs) - t.job.submitted_at for t in started]
    reserved = [min(r.start for r in t.runs) - t.job.submitted_at for t in started if t.held_since is not None]
    return BackfillSummary(system, span, held / (cpu * span) if cpu and span else 0.0, len(started),
                           _pct(waits, 50), _pct(waits, 99), len(reserved), _pct(reserved, 50),
                           max(reserved) if reserved else None, sum(late(t) for t in started),
                           run.counters.get("jobs_backfilled", 0),
                           run.counters.get("tasks_done", 0))


def late(track: JobTrack) -> bool:
    """It held room, an estimate was known, and it started after it."""
    return track.estimate is not None and bool(track.runs) and min(r.start for r in track.runs) > track.estimate + 1e-6


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}s"


def comparison_table(summaries: Sequence[BackfillSummary]) -> str:
    rows = [(s.system, f"{s.span_s:g}s", f"{s.utilization:.3f}", str(s.jobs_started), _s(s.wait_p50_s),
             _s(s.wait_p99_s), str(s.reserved_jobs), _s(s.reserved_wait_p50_s), _s(s.reserved_wait_max_s),
             str(s.after_estimate), str(s.backfilled), str(s.tasks_done)) for s in summaries]
    return format_table(("BACKFILL", "SPAN", "CPU UTIL", "JOBS", "WAIT P50", "WAIT P99", "RESERVED JOBS",
                         "THEIR WAIT P50", "MAX", "AFTER ESTIMATE", "BACKFILLED", "TASKS DONE"), rows)


def to_json(summaries: Sequence[BackfillSummary]) -> dict[str, Any]:
    return {"systems": [asdict(s) for s in summaries]}
