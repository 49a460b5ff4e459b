"""Feeds the usage history from the master's applied steps, and keeps the counters that
must outlive a task (OOM kills per node and queue, scheduling rounds).

The service calls `on_step` for every applied step and `on_round` after every scheduling
round. Both only append a reference: a heartbeat's cost must not grow with history (the
bench compares). `drain(state)` does the work in one batch, from the dashboard's loop
(every second) and before any read. Sans-IO: no clocks, no files."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from tcluster.master.events import Beat, Step
from tcluster.master.history import CLUSTER, NODE, QUEUE, TASK, HistoryConfig, Series, TaskRecord, settle
from tcluster.master.state import MasterState
from tcluster.model import Task, TaskState, TaskUsage

# Scheduling round latency buckets (seconds), as in a Prometheus histogram.
ROUND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
OOM_REASON = "OOMKilled"


@dataclass
class SchedulerStats:
    rounds: int = 0
    placements: int = 0
    round_seconds_sum: float = 0.0
    round_buckets: list[int] = field(default_factory=lambda: [0] * (len(ROUND_BUCKETS) + 1))

    def observe(self, seconds: float, placed: int) -> None:
        self.rounds += 1
        self.placements += placed
        self.round_seconds_sum += seconds
        self.round_buckets[bisect_left(ROUND_BUCKETS, seconds)] += 1


class Recorder:
    def __init__(self, config: HistoryConfig) -> None:
        self.config = config
        self.tasks: dict[str, TaskRecord] = {}          # running tasks (and ended ones until flushed)
        self.nodes: dict[str, Series] = {}
        self.queues: dict[str, Series] = {}
        self.cluster = Series(CLUSTER, config)
        self.oom_kills: Counter[tuple[str, str]] = Counter()   # (node, queue) -> kills; never reset
        self.scheduler = SchedulerStats()
        self.forgotten: set[str] = set()                 # jobs whose history the store must drop
        self._beats: list[tuple[float, str, dict[str, TaskUsage]]] = []
        self._ends: list[tuple[float, Task]] = []

    # ---- called by the service: O(1) ----

    def on_step(self, event: object, step: Step, wall: float) -> None:
        if step.usage and isinstance(event, Beat):
            self._beats.append((wall, event.node, step.usage))
        if step.tasks:
            self._ends.extend((wall, t) for t in step.tasks.values() if not t.state.holds_resources)
        if step.jobs_del:
            self.forgotten |= step.jobs_del

    def on_round(self, seconds: float, placed: int) -> None:
        self.scheduler.observe(seconds, placed)

    # ---- batched work ----

    def drain(self, state: MasterState) -> None:
        beats, self._beats = self._beats, []
        ends, self._ends = self._ends, []
        for wall, node, usage in beats:
            self._ingest_beat(state, wall, node, usage)
        for wall, task in ends:
            self._ingest_end(state, wall, task)
        for job_id in self.forgotten:
            for task_id in [t for t in self.tasks if t.rpartition(".")[0] == job_id]:
                del self.tasks[task_id]
        settle()

    def _record(self, state: MasterState, task_id: str, node: str) -> TaskRecord | None:
        rec = self.tasks.get(task_id)
        if rec is not None:            # a retry's new attempt resets it in _ingest_end
            rec.node = node or rec.node
            return rec
        task = state.task(task_id)
        if task is None:
            return None
        job = state.jobs[task.job_id]
        rec = self.tasks[task_id] = TaskRecord(task.job_id, node or task.node, job.spec.queue, task.attempt,
                                               Series(TASK, self.config))
        return rec

    def _ingest_beat(self, state: MasterState, wall: float, node: str, usage: dict[str, TaskUsage]) -> None:
        cpu_used = memory_used = 0.0
        for task_id, sample in usage.items():
            rec = self._record(state, task_id, node)
            if rec is None:
                continue
            values, new_ooms = rec.sample(wall, sample)
            rec.series.add(sample.sampled_at or wall, values)
            cpu_used += values[0] + values[1]
            memory_used += values[3]
            if new_ooms:
                self._oom(rec, sample.sampled_at or wall, new_ooms)
        self._node_sample(state, node, wall, cpu_used, memory_used)

    def _node_sample(self, state: MasterState, node: str, wall: float, cpu: float, memory: float) -> None:
        info = state.nodes.get(node)
        if info is None:
            return
        held = state.by_node.get(node, ())
        alloc_cpu = alloc_mem = 0.0
        for task_id in held:
            request = state.jobs[task_id.rpartition(".")[0]].spec.resources
            alloc_cpu += request.cpu
            alloc_mem += request.memory
        series = self.nodes.get(node)
        if series is None:
            series = self.nodes[node] = Series(NODE, self.config)
        series.add(wall, [cpu, memory, alloc_cpu, alloc_mem, info.capacity.cpu, info.capacity.memory, len(held)])

    def _ingest_end(self, state: MasterState, wall: float, task: Task) -> None:
        rec = self.tasks.get(task.id)
        if rec is None:
            if OOM_REASON not in task.reason:
                return
            rec = self._record(state, task.id, task.node)    # killed before its first heartbeat
            if rec is None:
                return
        final = task.usage.oom_kills
        new = max(0, final - rec.oom_seen)
        if not new and OOM_REASON in task.reason and not self._oom_after(rec, wall - 60.0):
            new = 1                      # the kernel's counter was not read in time; the exit says it
        rec.oom_seen = max(rec.oom_seen, final)
        if new:
            self._oom(rec, task.finished_at or wall, new)
        rec.peak = max(rec.peak, task.usage.memory_peak_bytes)
        rec.ended = task.state.terminal
        if not rec.ended:              # requeued for a retry: the next attempt has a new cgroup
            rec.attempt, rec.prev, rec.oom_seen = task.attempt + 1, None, 0
        rec.series.dirty = True

    @staticmethod
    def _oom_after(rec: TaskRecord, since: float) -> bool:
        return any(t >= since for t, _, _ in rec.ooms)

    def _oom(self, rec: TaskRecord, at: float, kills: int) -> None:
        rec.ooms.append((at, kills, rec.node))
        self.oom_kills[(rec.node, rec.queue)] += kills
        rec.series.dirty = True

    # ---- cluster and queues: sampled by the dashboard loop ----

    def sample_cluster(self, wall: float, state: MasterState, queue_rows: Iterable[object]) -> None:
        cap_cpu = cap_mem = alloc_cpu = alloc_mem = 0.0
        for name, node in state.nodes.items():
            if state.connected(name):
                cap_cpu += node.capacity.cpu
                cap_mem += node.capacity.memory
        running = pending = 0
        used: dict[str, tuple[float, float]] = {}
        for job_id, tasks in state.tasks.items():
            counts = state.counts.get(job_id)
            if not counts:
                continue
            n_run = counts[TaskState.RUNNING] + counts[TaskState.STARTING]
            running += n_run
            pending += counts[TaskState.PENDING]
            if n_run:
                spec = state.jobs[job_id].spec
                alloc_cpu += spec.resources.cpu * n_run
                alloc_mem += spec.resources.memory * n_run
                job_usage = self._job_usage(state, tasks)
                parts = spec.queue.split(".")
                for depth in range(1, len(parts) + 1):     # a queue holds what its children hold
                    path = ".".join(parts[:depth])
                    used[path] = _add(used.get(path, (0.0, 0.0)), job_usage)
        cpu_used = sum(c for path, (c, _) in used.items() if "." not in path)
        mem_used = sum(m for path, (_, m) in used.items() if "." not in path)
        self.cluster.add(wall, [cap_cpu, alloc_cpu, cpu_used, cap_mem, alloc_mem, mem_used, running, pending])
        for row in queue_rows:
            series = self.queues.get(row.path)
            if series is None:
                series = self.queues[row.path] = Series(QUEUE, self.config)
            cpu, mem = used.get(row.path, (0.0, 0.0))
            series.add(wall, [row.dominant_share, row.guaranteed_share, cpu, mem, row.running_tasks])

    @staticmethod
    def _job_usage(state: MasterState, tasks: list[Task]) -> tuple[float, float]:
        cpu = memory = 0.0
        for task in tasks:
            usage = state.usage.get(task.id)
            if usage is not None:
                cpu += usage.cpu_rate
                memory += usage.working_set_bytes
        return cpu, memory


def _add(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return a[0] + b[0], a[1] + b[1]
