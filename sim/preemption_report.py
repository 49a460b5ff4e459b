"""What `tcl sim --preempt-compare` prints: no preemption, preemption and the naive
policy side by side on one scenario (README, "Preemption in the simulator").

An episode of a queue opens at the first moment (after a round) when the queue has
tasks waiting and holds less than 0.9 x its target, the target being min(its
guaranteed share, the dominant share of its running plus waiting tasks), and closes at
the first later moment when it holds at least 0.9 x its target then. Its length is the
time to reach the share. Episodes still open when the run ends are counted as `never`
and left out of the percentiles. A queue below its target but already within 0.9 of it
opens no episode.

Work lost: for each victim whose room was freed by its grace running out, its run time
until then x its cpu request (a victim that finished on its own within its grace lost
nothing). Thrash: preemptions per preempted task, tasks preempted more than once
(re-preemptions count the preemptions after a task's first), and reversals: a
preemption of queue Y's task for queue X after X had lost a task to Y."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tcluster.views.formats import format_table
from tcluster.sim.engine import SimRun
from tcluster.sim.preempting import QueuePoint

RATIO = 0.9          # an episode ends at this fraction of the target
EPSILON = 1e-9


@dataclass(frozen=True)
class Episode:
    queue: str
    start: float
    end: float | None             # None: never reached 0.9 x its target within the run

    @property
    def length(self) -> float | None:
        return None if self.end is None else self.end - self.start


@dataclass(frozen=True)
class Summary:
    system: str
    hours: float
    preemptions: int              # decided (victims chosen)
    per_hour: float
    lost_cpu_s: float
    episodes: int
    p50_s: float | None
    p99_s: float | None
    never: int
    preempted_tasks: int
    max_per_task: int
    re_preemptions: int
    reversals: int
    tasks_done: int
    per_queue: dict[str, tuple[int, float | None, float | None, int]]   # queue -> episodes, p50, p99, never


def episodes(timeline: Sequence[tuple[float, tuple[QueuePoint, ...]]], queues: Sequence[str]) -> list[Episode]:
    opened: dict[int, float] = {}
    out: list[Episode] = []
    for time, points in timeline:
        for i, point in enumerate(points):
            short = point.waiting and point.share < RATIO * point.target - EPSILON
            if short and i not in opened:
                opened[i] = time
            elif not short and i in opened:
                out.append(Episode(queues[i], opened.pop(i), time))
    return out + [Episode(queues[i], since, None) for i, since in sorted(opened.items())]


def _percentiles(eps: Sequence[Episode]) -> tuple[float | None, float | None]:
    lengths = [e.length for e in eps if e.length is not None]
    if not lengths:
        return None, None
    return float(np.percentile(lengths, 50)), float(np.percentile(lengths, 99))


def thrash(decisions: Sequence[tuple[float, str, int, str, str]]) -> tuple[int, int, int, int]:
    """(tasks preempted, most preemptions of one task, re-preemptions, reversals)."""
    per_task = Counter((job, task) for _, job, task, _, _ in decisions)
    seen: set[tuple[str, str]] = set()       # (victim queue, preemptor queue)
    reversals = 0
    for _, _, _, victim, by in decisions:
        reversals += (by, victim) in seen
        seen.add((victim, by))
    return len(per_task), max(per_task.values(), default=0), sum(n - 1 for n in per_task.values()), reversals


def summarize(system: str, run: SimRun) -> Summary:
    rec = run.preemption
    assert rec is not None, "summarize needs a run with record_queues or preemption"
    eps = episodes(rec.timeline, rec.queues)
    hours = run.end / 3600 if run.end > 0 else 0.0
    decided = len(rec.decisions)
    tasks, most, again, reversals = thrash(rec.decisions)
    per_queue = {}
    for queue in rec.queues:
        mine = [e for e in eps if e.queue == queue]
        per_queue[queue] = (len(mine), *_percentiles(mine), sum(e.end is None for e in mine))
    return Summary(system, hours, decided, decided / hours if hours else 0.0, sum(p.lost_cpu_s for p in rec.log),
                   len(eps), *_percentiles(eps), sum(e.end is None for e in eps), tasks, most, again, reversals,
                   run.counters["tasks_done"], per_queue)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}s"


def comparison_table(summaries: Sequence[Summary]) -> str:
    rows = [(s.system, f"{s.hours * 3600:g}s", str(s.preemptions), f"{s.per_hour:.1f}", f"{s.lost_cpu_s:,.0f}", str(s.episodes),
             _s(s.p50_s), _s(s.p99_s), str(s.never),
             f"{s.preemptions / s.preempted_tasks:.2f}/{s.max_per_task}" if s.preempted_tasks else "-",
             str(s.re_preemptions), str(s.reversals), str(s.tasks_done)) for s in summaries]
    head = format_table(("SYSTEM", "END", "PREEMPTIONS", "PER HOUR", "CPU-S LOST", "EPISODES", "TO SHARE P50", "P99",
                         "NEVER", "PER TASK MEAN/MAX", "RE-PREEMPTED", "REVERSALS", "TASKS DONE"), rows)
    queues = list(summaries[0].per_queue) if summaries else []
    cells = []
    for queue in queues:
        row = [queue]
        for s in summaries:
            n, p50, p99, never = s.per_queue[queue]
            row.append(f"{n} / {_s(p50)} / {_s(p99)} / {never}")
        cells.append(row)
    per_queue = format_table(("QUEUE", *(f"{s.system}: episodes / p50 / p99 / never" for s in summaries)), cells)
    return f"{head}\n\n{per_queue}"


def to_json(summaries: Sequence[Summary]) -> dict[str, Any]:
    return {"systems": [asdict(s) for s in summaries]}


def write_share_plot(runs: Sequence[tuple[str, SimRun]], path: Path | str, title: str) -> None:
    """Each queue's share (solid) and target (dotted) over time, one panel per system."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise RuntimeError("--plot needs matplotlib: pip install 'tcluster[plot]'") from None
    matplotlib.use("Agg")   # files only, no display
    import matplotlib.pyplot as plt

    figure, panels = plt.subplots(len(runs), 1, figsize=(9, 2.8 * len(runs)), sharex=True, squeeze=False)
    for (system, run), axes in zip(runs, panels[:, 0]):
        rec = run.preemption
        assert rec is not None
        times = [t for t, _ in rec.timeline]
        for i, queue in enumerate(rec.queues):
            line, = axes.step(times, [p[i].share for _, p in rec.timeline], where="post", label=queue)
            axes.step(times, [p[i].target for _, p in rec.timeline], where="post", linestyle=":",
                      color=line.get_color())
        axes.set_ylabel("dominant share")
        axes.set_ylim(0, 1.05)
        axes.set_title(f"{system}: share (solid) and target (dotted)", fontsize="small")
    panels[0, 0].legend(loc="upper right", fontsize="small")
    panels[-1, 0].set_xlabel("time (s)")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
