"""What `tcl sim` prints: JSON (`-o json`), tables, the timeline CSV and its plot.

JSON contract: `jobs` [{name, queue, tasks_total, tasks_running, tasks_done,
dominant_share, placements: [{task, node, start, end}], state, submitted, released,
started, ended, reason, tasks_failed, max_running}], `nodes` [{name, capacity, free}],
`metrics` {...}. Per job: `released` is when its dependency was met (null: it has none
or it still waits), `started` its first task's start, `ended` when its last task ended or
it was cancelled (null: not yet), `reason` why it was cancelled or what it still waits for;
an array's job also has `array` (as written), a task that hit its time limit
`"reason": "TimeLimit"` in its placement. Sizes are bytes, shares are of the total cluster capacity,
and everything is taken at the end of the run. `end` is null for a task still running
then. Field names are an interface: add, never rename."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from tcluster.domain.resources import MEMORY, Resources
from tcluster.scheduler.mch_paper import paper_weights
from tcluster.scheduler.queuestats import JobUsage, queue_rows
from tcluster.scheduler.views import JobView
from tcluster.sim.batch import job_state
from tcluster.sim.engine import SimRun
from tcluster.sim.jobs import JobTrack, TaskRun
from tcluster.sim.scenario import Scenario

Json = dict[str, Any]


def resources_json(r: Resources) -> Json:
    return {k: (int(round(v)) if k == MEMORY else v) for k, v in r.as_dict().items()}


def job_json(track: JobTrack, capacity: Resources) -> Json:
    return {
        "name": track.spec.name,
        "queue": track.spec.queue,
        "tasks_total": track.spec.tasks,
        "tasks_running": len(track.running),
        "tasks_done": track.done,
        "dominant_share": track.spec.resources.times(len(track.running)).dominant_share(capacity),
        "placements": [_placement(r) for r in track.runs],
        "state": job_state(track).value,
        "submitted": track.job.submitted_at,
        "released": track.released_at,
        "started": track.runs[0].start if track.runs else None,
        "ended": track.ended_at,
        "reason": track.reason,
        "tasks_failed": track.failed,
        "max_running": track.peak,
        **({"array": track.spec.batch.array} if track.spec.batch.array else {}),
    }


def _placement(run: TaskRun) -> Json:
    placed = {"task": run.task, "node": run.node, "start": run.start, "end": run.end}
    return {**placed, "reason": run.reason} if run.reason else placed


def to_json(run: SimRun, scenario: Scenario, fairness: str, placement: str) -> Json:
    nodes = [{"name": name, "capacity": resources_json(Resources.of(dict(zip(run.matrix.kinds, cap)))),
              "free": resources_json(run.matrix.free(name))}
             for name, cap in zip(run.matrix.names, run.matrix.view().capacity.tolist())]
    return {
        "jobs": [job_json(t, run.capacity) for t in run.tracks],
        "nodes": nodes,
        "metrics": metrics(run, scenario, fairness, placement),
        **({"lotes": run.lotes} if run.lotes is not None else {}),
    }


def metrics(run: SimRun, scenario: Scenario, fairness: str, placement: str) -> Json:
    free = Resources.of({k: sum(run.matrix.free(n).get(k) for n in run.matrix.names) for k in run.matrix.kinds})
    cap = run.capacity.as_dict()
    active = [t for t in run.tracks if t.running or t.pending]
    views = [JobView(t.spec.name, t.spec.queue, t.job.submitted_at, t.spec.resources, max(t.pending, 1),
                     len(t.running), t.spec.weight) for t in active]
    weights, first = paper_weights(views, run.capacity, scenario.queues) if views else ({}, None)
    waits = [r.start - t.job.submitted_at for t in run.tracks for r in t.runs]
    usage = [JobUsage(t.spec.queue, t.spec.resources, len(t.running), t.pending) for t in run.tracks]
    return {
        "time": run.end,
        "fairness": fairness,
        "placement": placement,
        **run.counters,
        "utilization": {k: (1 - free.get(k) / v) if v else 0.0 for k, v in cap.items()},
        "mean_task_wait_s": sum(waits) / len(waits) if waits else 0.0,
        "flattened_weights": weights,          # MCH's section III weights of the jobs still active
        "first_saturated": first,
        "queues": [{"path": r.path, "guaranteed_share": r.guaranteed_share, "dominant_share": r.dominant_share}
                   for r in queue_rows(scenario.queues, usage, run.capacity) if r.path],
        **user_shares(run),
    }


def user_shares(run: SimRun) -> Json:
    """Jobs with a `user:`: each user's usage over the run (dominant-share-seconds: a task's
    dominant share times the seconds it ran) and part of the users' total; the error is the
    largest distance of a part from an even split (0: the users' integrated shares are equal)."""
    used: dict[str, float] = {}
    for track in run.tracks:
        if not track.spec.user:
            continue
        mu = track.spec.resources.dominant_share(run.capacity)
        seconds = sum(min(r.end if r.end is not None else run.end, run.end) - r.start for r in track.runs)
        used[track.spec.user] = used.get(track.spec.user, 0.0) + mu * seconds
    total = sum(used.values())
    if not used or total <= 0:
        return {}
    parts = {user: value / total for user, value in sorted(used.items())}
    return {"users": {user: {"usage_s": used[user], "part": parts[user]} for user in parts},
            "user_share_error": max(abs(part - 1 / len(parts)) for part in parts.values())}


def write_timeline(run: SimRun, scenario: Scenario, path: Path | str) -> None:
    """One row per change: time, then each job's dominant share (a step function)."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["time", *(j.name for j in scenario.jobs)])
        for time, shares in run.timeline:
            writer.writerow([f"{time:g}", *(f"{s:.6f}" for s in shares)])


def write_plot(run: SimRun, scenario: Scenario, path: Path | str, title: str) -> None:
    """The timeline as a step plot (the paper's Figure 4b). Needs matplotlib."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise RuntimeError("--plot needs matplotlib: pip install 'tcluster[plot]'") from None
    matplotlib.use("Agg")   # files only, no display
    import matplotlib.pyplot as plt

    times = [t for t, _ in run.timeline]
    figure, axes = plt.subplots(figsize=(8, 4.5))
    for i, job in enumerate(scenario.jobs):
        axes.step(times, [shares[i] for _, shares in run.timeline], where="post", label=job.name)
    axes.set_xlabel("time (s)")
    axes.set_ylabel("dominant share")
    axes.set_ylim(0, 1.05)
    axes.set_title(title)
    axes.legend(loc="upper right", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
