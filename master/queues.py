"""The master's queue tree: loaded at start, reloaded on SIGHUP, checked at submit.

A reload is all or nothing. If the new file is bad, or it would take away a leaf that
unfinished jobs still sit in, the old tree stays in force and the error is logged.
This is what YARN does when a refresh tries to remove a queue that has running apps.
Jobs are never touched by a reload."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Mapping

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import Job, JobSpec, Task, TaskState
from tcluster.domain.units import format_duration
from tcluster.domain.resources import Resources
from tcluster.scheduler.queues import QueueTree, default_tree, load_queue_file
from tcluster.views.queuerow import QueueRow
from tcluster.scheduler.queuestats import JobUsage, queue_rows
from tcluster.scheduler.decay import DecayLedger
from tcluster.scheduler.usershare import user_of

log = logging.getLogger(__name__)


def load_tree(path: Path | None) -> QueueTree:
    """The tree in `path`, or the built-in one-leaf tree; raises YamlConfigError."""
    return load_queue_file(path) if path is not None else default_tree()


def check_keeps_jobs(tree: QueueTree, jobs: Iterable[Job]) -> None:
    """Refuses a tree in which an unfinished job's queue is no longer a leaf."""
    stranded: dict[str, int] = {}
    for job in jobs:
        if not job.state.terminal and not tree.is_leaf(job.spec.queue):
            stranded[job.spec.queue] = stranded.get(job.spec.queue, 0) + 1
    if stranded:
        queue, count = sorted(stranded.items())[0]
        raise InvalidArgument(
            tree.source, f"queue {queue!r} still has {count} unfinished job(s) but is not a leaf in the new file; "
            "keep it until they end (or cancel them)")


def reload_tree(current: QueueTree, path: Path | None, jobs: Iterable[Job]) -> tuple[QueueTree, str]:
    """(the tree now in force, a line for the log). Never raises: on error, `current`."""
    if path is None:
        return current, "no --queues file was given; nothing to reload"
    try:
        tree = load_tree(path)
        check_keeps_jobs(tree, jobs)
    except InvalidArgument as error:
        log.error("queue reload refused, the old tree stays in force: %s", error)
        return current, f"queue reload refused, the old tree stays in force: {error}"
    log.info("queues reloaded from %s: leaves %s", path, ", ".join(tree.leaves))
    return tree, f"queues reloaded from {path}: {len(tree.leaves)} leaves"


def job_usage(jobs: dict[str, Job], counts: Mapping[str, Mapping[TaskState, int]]) -> list[JobUsage]:
    """From the per-job task counts the state keeps: O(jobs), not O(tasks) (the dashboard
    and /metrics ask every few seconds)."""
    usage = []
    for job_id, job in jobs.items():
        if job.state.terminal:
            continue
        job_counts = counts.get(job_id, {})
        running = job_counts.get(TaskState.STARTING, 0) + job_counts.get(TaskState.RUNNING, 0)
        pending = 0 if job.cancelled else job_counts.get(TaskState.PENDING, 0)
        usage.append(JobUsage(job.spec.queue, job.spec.resources, running, pending,
                              user_of(job.spec.owner, job.spec.user)))
    return usage


def dominant_share(job: Job, tasks: list[Task], capacity: Resources) -> float:
    running = sum(1 for t in tasks if t.state.holds_resources)
    return job.spec.resources.times(running).dominant_share(capacity)


def rows(tree: QueueTree, jobs: dict[str, Job], counts: Mapping[str, Mapping[TaskState, int]],
         capacity: Resources, ledger: DecayLedger | None = None) -> list[QueueRow]:
    return queue_rows(tree, job_usage(jobs, counts), capacity, ledger)


def with_queue_time_limit(spec: JobSpec, queue_max_s: float) -> JobSpec:
    """A queue's max_time_limit caps a job's --time-limit and is the limit of one without."""
    if not queue_max_s:
        return spec
    if not spec.time_limit_s:
        return replace(spec, time_limit_s=queue_max_s)
    if spec.time_limit_s > queue_max_s:
        raise InvalidArgument("time_limit", f"{format_duration(spec.time_limit_s)} is above queue {spec.queue}'s "
                                            f"max_time_limit {format_duration(queue_max_s)}")
    return spec
