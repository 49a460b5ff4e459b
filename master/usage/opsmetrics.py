"""The operator's series on /metrics beside the cluster's (master/usage/metrics.py):
what runs (`tcluster_build_info`), whether this master leads (`tcluster_master_leader`),
how jobs and tasks ended (`tcluster_jobs_finished_total{state}`,
`tcluster_tasks_finished_total{state}`), and the process itself (prometheus_client's
process_* and python_info, which a custom registry does not get by default).

The outcome counters count transitions this master applied since it started leading, as
any Prometheus counter counts from its process's start: `rate()` and `increase()` handle
the reset at a restart or a failover. A job already finished when the master starts is not
counted again, nor is a finished job written once more (a `tcl update` of its record)."""

from __future__ import annotations

import platform
from collections import Counter
from typing import Any, Iterator

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tcluster.domain.model import JobState, TaskState
from tcluster.master.core.feed import AppliedStep
from tcluster.version import build_commit
from tcluster import __version__


class Outcomes:
    """A step listener: job and task ends by final state (SUCCEEDED, FAILED, CANCELLED, ...)."""

    def __init__(self) -> None:
        self.jobs: Counter[str] = Counter()
        self.tasks: Counter[str] = Counter()
        self._ended_jobs: set[str] = set()        # finished jobs already counted (or found finished)

    def seed(self, state: Any) -> None:
        """The jobs already finished when counting starts: not counted as they are seen again."""
        self._ended_jobs = {job_id for job_id, job in state.jobs.items() if job.state.terminal}

    def on_step(self, applied: AppliedStep) -> None:
        step = applied.step
        for task_id, task in step.tasks.items():
            before = applied.before.get(task_id)
            if task.state.terminal and (before is None or not before.state.terminal):
                self.tasks[task.state.value] += 1
        for job_id, job in step.jobs.items():
            if not job.state.terminal:
                self._ended_jobs.discard(job_id)        # requeued: its next end counts again
            elif job_id not in self._ended_jobs:
                self._ended_jobs.add(job_id)
                self.jobs[job.state.value] += 1
        self._ended_jobs.difference_update(step.jobs_del)


class OpsCollector(Collector):
    def __init__(self, service: Any, outcomes: Outcomes, commit: str | None = None) -> None:
        self.service, self.outcomes = service, outcomes
        self.commit = build_commit() if commit is None else commit     # git once, not per scrape

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("tcluster_build_info", "1, labelled with the version and commit this master runs",
                                 labels=["version", "commit", "python"])
        info.add_metric([__version__, self.commit, platform.python_version()], 1)
        yield info
        # A standby serves 0 here (master/web/standby.py) until it leads: sum() over the
        # masters' targets counts the leaders.
        yield GaugeMetricFamily("tcluster_master_leader", "1 while this master is the acting one",
                                value=float(getattr(self.service, "state", None) is not None))
        yield self._counted("tcluster_jobs_finished", "jobs that ended, by final state (since this master led)",
                            self.outcomes.jobs, [s.value for s in JobState if s.terminal])
        yield self._counted("tcluster_tasks_finished", "task attempts that ended, by final state "
                            "(since this master led)", self.outcomes.tasks, [s.value for s in TaskState if s.terminal])

    @staticmethod
    def _counted(name: str, text: str, counts: Counter[str], states: list[str]) -> CounterMetricFamily:
        family = CounterMetricFamily(name, text, labels=["state"])
        for state in states:                   # every final state, zeros too: rate() needs the series
            family.add_metric([state], counts.get(state, 0))
        return family


def ops_registry(service: Any, outcomes: Outcomes, commit: str | None = None) -> CollectorRegistry:
    """Rendered at every scrape (not cached with the cluster's series: CPU time moves on)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OpsCollector(service, outcomes, commit))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry
