"""Which usage report the agent sends now (issue 26), sans-IO: the samples, the node's free
resources and the time go in; the samples to send (or None: nothing now) come out.

With a master that gave no usage interval (an older one: Registered.usage_interval_s = 0)
every call sends every sample, as heartbeats always did. Otherwise a report goes when the
node's free resources or its set of running attempts changed, when usage moved beyond the
threshold (at most every quarter interval), or once per interval; a report between those
carries only the tasks whose usage moved since it was last sent (or that were never sent),
the once-per-interval one every task (its counters moved even where its rate did not)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tcluster.wire.features import UsageThreshold, changed_usage, report_due

U = TypeVar("U")


@dataclass
class UsageReporter(Generic[U]):
    """One per session: the first report after a registration carries everything."""
    threshold: UsageThreshold = UsageThreshold()
    last_sent_at: float = float("-inf")
    last_free: object = None
    last_attempts: dict[str, int] = field(default_factory=dict)
    last_figures: dict[str, tuple[int, float, int]] = field(default_factory=dict)

    def decide(self, now: float, free: object, usage: dict[str, tuple[int, U]], interval_s: float,
               floor_s: float) -> dict[str, tuple[int, U]] | None:
        if interval_s <= 0:
            return usage
        attempts = {task_id: attempt for task_id, (attempt, _) in usage.items()}
        figures = {task_id: (attempt, float(getattr(u, "cpu_rate", 0.0)), int(getattr(u, "memory_bytes", 0)))
                   for task_id, (attempt, u) in usage.items()}
        changed = changed_usage(self.last_figures, figures, self.threshold)
        state_changed = free != self.last_free or attempts != self.last_attempts
        if not report_due(now, self.last_sent_at, interval_s, state_changed, bool(changed), floor_s).send:
            return None
        # The periodic report carries every task: a steady task's rate never moves past the
        # threshold, but its counters (CPU seconds) do, and dashboards integrate them.
        if now - self.last_sent_at >= interval_s:
            changed = list(figures)
        self.last_sent_at, self.last_free, self.last_attempts = now, free, attempts
        self.last_figures = {task_id: self.last_figures[task_id] for task_id in figures
                             if task_id in self.last_figures}
        self.last_figures.update({task_id: figures[task_id] for task_id in changed})
        return {task_id: usage[task_id] for task_id in changed}
