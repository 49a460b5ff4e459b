"""Feeds the usage history from the master's applied steps, and keeps the counters that
must outlive a task (OOM kills per node and queue, scheduling rounds).

The service calls `on_step` for every applied step (a step listener) and `on_round` after every scheduling
round. Both only append a reference: a heartbeat's cost must not grow with history (the
bench compares). `drain(state)` does the work in one batch, from the dashboard's loop
(every second) and before any read. Sans-IO: no clocks, no files."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from tcluster.domain.gpuusage import GpuSample
from tcluster.master.core.events import Beat, Preempt
from tcluster.master.core.feed import AppliedStep
from tcluster.master.usage.history import CLUSTER, GPU, NODE, QUEUE, HistoryConfig, Series, TaskRecord, settle
from tcluster.master.usage.ingest import CPU, WS, Counters, extract
from tcluster.master.usage.liveusage import LiveUsage
from tcluster.master.usage.taskrings import TaskRings
from tcluster.master.core.state import MasterState
from tcluster.master.core.usageblock import UsageBlock
from tcluster.domain.model import Task, TaskState

# Scheduling round latency buckets (seconds), as in a Prometheus histogram.
ROUND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
OOM_REASON = "OOMKilled"
CHANGED_MAX = 100_000
PREEMPTION_MARKS = 10_000      # the newest preemptions, for the job and queue charts (memory only)


@dataclass(frozen=True)
class PreemptionMark:
    at: float          # unix seconds: when it was decided
    task_id: str       # the victim
    by_job: str        # the job the room was for
    reason: str
BeatRef = tuple[float, str, UsageBlock]     # (wall, node, the samples the step kept)


@dataclass
class _Batch:
    """What was reported up to one moment, drained heartbeat by heartbeat from `cursor`."""
    beats: list[BeatRef]
    ends: list[tuple[float, Task]]
    gpu_beats: list[tuple[float, tuple[GpuSample, ...]]]
    cursor: int = 0

    def next_part(self, most_samples: int | None) -> list[BeatRef]:
        """The next heartbeats, at least one, until they hold `most_samples` samples."""
        start = end = self.cursor
        if most_samples is None:
            end = len(self.beats)
        else:
            samples = 0
            while end < len(self.beats) and (end == start or samples < most_samples):
                samples += len(self.beats[end][2])
                end += 1
        self.cursor = end
        return self.beats[start:end]


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
        self.rings = TaskRings(config, prefill=True)    # their series, one slot each
        self.counters = Counters()
        self.live = LiveUsage()                          # each slot's newest CPU and working set, by queue
        self._by_slot: list[TaskRecord | None] = []
        self._slot_of: dict[str, int] = {}
        self._node_codes: dict[str, int] = {}            # node name -> code, in order of first sight
        self._slot_node = np.empty(0, dtype=np.int32)    # each slot's node code (-1: not yet seen)
        self.nodes: dict[str, Series] = {}
        self.queues: dict[str, Series] = {}
        self.cluster = Series(CLUSTER, config)
        self.oom_kills: Counter[tuple[str, str]] = Counter()   # (node, queue) -> kills; never reset
        self.scheduler = SchedulerStats()
        self.forgotten: set[str] = set()                 # jobs whose history the store must drop
        self._beats: list[BeatRef] = []
        self._ends: list[tuple[float, Task]] = []
        self._gpu_beats: list[tuple[float, tuple[GpuSample, ...]]] = []
        self._batch: _Batch | None = None                # what drain_part is part-way through
        self.generation = 0                              # steps and rounds seen: /metrics is cached per value
        self._changed: set[str] | None = set()           # tasks changed (placed, ended) since asked; None: any
        self.preemptions: deque[PreemptionMark] = deque(maxlen=PREEMPTION_MARKS)   # newest last, for the charts

    # ---- called by the service: O(1) ----

    def on_step(self, applied: AppliedStep) -> None:
        event, step, wall = applied.event, applied.step, applied.now.wall
        self.generation += 1
        if step.tasks and self._changed is not None:
            self._changed.update(step.tasks)
            if len(self._changed) > CHANGED_MAX:     # nobody asks (no scrapes): say "all", stay small
                self._changed = None
        if step.usage is not None and isinstance(event, Beat):
            self._beats.append((wall, event.node, step.usage))
        if step.tasks:
            self._ends.extend((wall, t) for t in step.tasks.values() if not t.state.holds_resources)
        if step.jobs_del:
            self.forgotten |= step.jobs_del
        if isinstance(event, Preempt):
            for intent in step.kills_put.values():
                self.preemptions.append(PreemptionMark(wall, intent.task_id, intent.by_job, intent.reason))

    def on_gpus(self, samples: tuple[GpuSample, ...], wall: float) -> None:
        """A heartbeat's NVML samples (kept apart from the usage block: only GPU nodes with
        NVML send them, one per bound device)."""
        if samples:
            self._gpu_beats.append((wall, samples))

    def on_round(self, seconds: float, placed: int) -> None:
        self.generation += 1
        self.scheduler.observe(seconds, placed)

    def take_changed_tasks(self) -> set[str] | None:
        """Tasks changed since the last call; None: too many to list, take all as changed."""
        changed, self._changed = self._changed, set()
        return changed

    # ---- task records and their slots ----

    def add_record(self, task_id: str, rec: TaskRecord) -> TaskRecord:
        """Gives `rec` a slot; a record loaded from disk brings its rings and counters along."""
        loaded = rec.series
        slot = self.rings.take()
        self.counters.grow(self.rings.capacity)
        self.live.grow(self.rings.capacity)
        self._by_slot.extend([None] * (self.rings.capacity - len(self._by_slot)))
        self._by_slot[slot], self._slot_of[task_id] = rec, slot
        rec.slot, rec.series = slot, self.rings.series(slot)
        self.live.assign(slot, rec.queue)
        if loaded is not None:
            for number, tier in enumerate(loaded.tiers):
                if tier.last >= 0:
                    first = max(tier.last - tier.size + 1, 0)
                    rec.series.tiers[number].put_rows(first, tier.data[np.arange(first, tier.last + 1) % tier.size])
                    rec.series.tiers[number].flushed = tier.flushed
            rec.series.dirty = False
        if rec.prev is not None:
            self.counters.prev[slot] = rec.prev
        self.counters.oom_seen[slot] = rec.oom_seen
        self.tasks[task_id] = rec
        return rec

    def release(self, task_id: str) -> None:
        """The task's history is on disk (or forgotten): its slot goes back."""
        rec = self.tasks.pop(task_id, None)
        slot = self._slot_of.pop(task_id, None)
        if slot is not None:
            self.rings.give_back(slot)
            self.counters.reset(slot)
            self.live.stopped(slot)
            self._by_slot[slot] = None
            if slot < len(self._slot_node):
                self._slot_node[slot] = -1
        if rec is not None:
            rec.slot = -1

    def sync(self, rec: TaskRecord) -> TaskRecord:
        """Copies the slot's counters into the record (to persist them)."""
        if rec.slot >= 0:
            prev = self.counters.prev[rec.slot]
            rec.prev = tuple(prev.tolist()) if prev[0] > 0 else None
            rec.oom_seen = int(self.counters.oom_seen[rec.slot])
        return rec

    def _record(self, state: MasterState, task_id: str, node: str) -> TaskRecord | None:
        rec = self.tasks.get(task_id)
        if rec is not None:
            return rec
        task = state.task(task_id)
        if task is None:
            return None
        job = state.jobs[task.job_id]
        return self.add_record(task_id, TaskRecord(task.job_id, node or task.node, job.spec.queue, task.attempt))

    # ---- batched work ----

    def drain(self, state: MasterState) -> None:
        """Everything reported so far, at once (before a read, at stop): the rest of a batch
        the dashboard's loop was part-way through, then what came since."""
        if self._batch is not None:
            self.drain_part(state, None)
        self.drain_part(state, None)

    def drain_part(self, state: MasterState, most_samples: int | None) -> bool:
        """Ingests the pending batch's next heartbeats, about `most_samples` samples (all of
        them: None); True while some are left. A batch is what was reported when it was
        taken; its ends, GPU samples and forgotten jobs go after its last heartbeat, as in
        one drain (a retry's first samples are never read as its ended attempt's). The
        dashboard's loop drains in parts so that no part holds the loop long: a burst's
        first samples make a record each (~25 µs), and 9,000 of them in one drain held it
        230 ms, the churn's p99 (issue 38)."""
        if self._batch is None:
            self._batch = _Batch(self._beats, self._ends, self._gpu_beats)
            self._beats, self._ends, self._gpu_beats = [], [], []
        batch = self._batch
        part = batch.next_part(most_samples)
        if part:
            self._ingest_beats(state, part)
        if batch.cursor < len(batch.beats):
            return True
        self._batch = None
        for wall, samples in batch.gpu_beats:
            self._ingest_gpus(state, wall, samples)
        for wall, task in batch.ends:
            self._ingest_end(state, wall, task)
        for job_id in self.forgotten:
            for task_id in [t for t in self.tasks if t.rpartition(".")[0] == job_id]:
                self.release(task_id)
        settle()
        return False

    def _slots(self, state: MasterState, beats: list[BeatRef],
               ids: list[str]) -> list[int]:
        """The slot of every sample (-1: a task the state no longer knows); a task seen
        first gets one, and one that moved to another node (a retry) its new node."""
        slots = list(map(self._slot_of.get, ids))
        if None in slots:
            i = 0
            for _, node, block in beats:
                for task_id in block.ids:
                    if slots[i] is None:
                        rec = self._record(state, task_id, node)
                        slots[i] = rec.slot if rec is not None else -1
                    i += 1
        return slots

    def _ingest_beats(self, state: MasterState, beats: list[BeatRef]) -> None:
        ids: list[str] = []
        attempts: list[int] = []
        for _, _, block in beats:
            ids.extend(block.ids)
            attempts.extend(block.attempts)
        slots = np.array(self._slots(state, beats, ids), dtype=np.int64)
        sizes = [len(block) for _, _, block in beats]
        raw = extract([block for _, _, block in beats])
        known = slots >= 0
        self._node_samples(state, beats, sizes, np.where(known, raw[:, CPU], 0.0), np.where(known, raw[:, WS], 0.0))
        walls = np.repeat([wall for wall, _, _ in beats], sizes)
        tries = np.array(attempts, dtype=np.int64)
        if not known.all():
            slots, raw, walls, tries = slots[known], raw[known], walls[known], tries[known]
        if not len(slots):
            return
        self._follow_nodes(beats, sizes, slots, known)
        self.live.sampled(slots, tries, raw[:, CPU], raw[:, WS])
        derived = self.counters.derive(slots, raw, walls)
        self.rings.add(derived.slots, derived.times, derived.rows, derived.first)
        for slot, at, kills in derived.ooms:
            self._oom(self._by_slot[slot], at, kills)

    def _follow_nodes(self, beats: list[BeatRef], sizes: list[int],
                      slots: np.ndarray, known: np.ndarray) -> None:
        """A record keeps the node of its newest sample (a retry may run elsewhere)."""
        codes = [self._node_codes.setdefault(node, len(self._node_codes)) for _, node, _ in beats]
        sample_codes = np.repeat(np.array(codes, dtype=np.int32), sizes)[known]
        if len(self._slot_node) < self.rings.capacity:
            self._slot_node = np.concatenate([self._slot_node, np.full(self.rings.capacity - len(self._slot_node), -1,
                                                                       dtype=np.int32)])
        moved = np.flatnonzero(self._slot_node[slots] != sample_codes)
        if len(moved):
            names = list(self._node_codes)
            for i in moved.tolist():
                slot, code = int(slots[i]), int(sample_codes[i])
                self._by_slot[slot].node = names[code]
                self._slot_node[slot] = code

    def _node_samples(self, state: MasterState, beats: list[BeatRef],
                      sizes: list[int], cpu: np.ndarray, memory: np.ndarray) -> None:
        starts = np.cumsum([0] + sizes[:-1])
        nonempty = np.array(sizes) > 0
        cpu_sums = np.zeros(len(beats))
        mem_sums = np.zeros(len(beats))
        if len(cpu):
            cpu_sums[nonempty] = np.add.reduceat(cpu, starts[nonempty])
            mem_sums[nonempty] = np.add.reduceat(memory, starts[nonempty])
        for (wall, node, _), c, m in zip(beats, cpu_sums.tolist(), mem_sums.tolist()):
            self._node_sample(state, node, wall, c, m)

    def _node_sample(self, state: MasterState, node: str, wall: float, cpu: float, memory: float) -> None:
        info = state.nodes.get(node)
        if info is None:
            return
        free = state.free(node)
        capacity = info.capacity
        series = self.nodes.get(node)
        if series is None:
            series = self.nodes[node] = Series(NODE, self.config)
        series.add(wall, [cpu, memory, max(0.0, capacity.cpu - free.cpu), max(0.0, capacity.memory - free.memory),
                          capacity.cpu, capacity.memory, len(state.by_node.get(node, ()))])

    def _ingest_gpus(self, state: MasterState, wall: float, samples: tuple[GpuSample, ...]) -> None:
        """One bucket row per task: its devices' mean utilization, memory used and memory
        summed. Samples of an attempt that no longer holds its devices are left out."""
        by_task: dict[str, list[GpuSample]] = {}
        for sample in samples:
            by_task.setdefault(sample.task_id, []).append(sample)
        for task_id, mine in by_task.items():
            task = state.task(task_id)
            if task is None or not task.state.holds_resources or task.attempt != mine[0].attempt:
                continue
            rec = self._record(state, task_id, task.node)
            if rec is None:
                continue
            if rec.gpu is None:
                rec.gpu = Series(GPU, self.config)
            rec.gpu.add(wall, [sum(s.util_percent for s in mine) / len(mine), sum(s.memory_used_bytes for s in mine),
                               sum(s.memory_total_bytes for s in mine), len(mine)])

    def _ingest_end(self, state: MasterState, wall: float, task: Task) -> None:
        rec = self.tasks.get(task.id)
        if rec is None:
            if OOM_REASON not in task.reason:
                return
            rec = self._record(state, task.id, task.node)    # killed before its first heartbeat
            if rec is None:
                return
        seen = int(self.counters.oom_seen[rec.slot])
        final = task.usage.oom_kills
        new = max(0, final - seen)
        if not new and OOM_REASON in task.reason and not self._oom_after(rec, wall - 60.0):
            new = 1                      # the kernel's counter was not read in time; the exit says it
        self.counters.oom_seen[rec.slot] = max(seen, final)
        if new:
            self._oom(rec, task.finished_at or wall, new)
        rec.peak = max(rec.peak, task.usage.memory_peak_bytes)
        rec.ended = task.state.terminal
        self.live.stopped(rec.slot, task.attempt)
        if not rec.ended:              # requeued for a retry: the next attempt has a new cgroup
            rec.attempt = task.attempt + 1
            if not self.live.reported_after(rec.slot, task.attempt):   # its samples came in this drain
                self.counters.reset(rec.slot)
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
        """The cluster's and the queues' rows: capacity and allocation from the state, what
        runs uses from the slots' newest samples (LiveUsage; drain first)."""
        cap_cpu = cap_mem = alloc_cpu = alloc_mem = 0.0
        for name, node in state.nodes.items():
            if state.connected(name):
                cap_cpu += node.capacity.cpu
                cap_mem += node.capacity.memory
        running = pending = 0
        for job_id, counts in state.counts.items():
            n_run = counts[TaskState.RUNNING] + counts[TaskState.STARTING]
            running += n_run
            pending += counts[TaskState.PENDING]
            if n_run:
                resources = state.jobs[job_id].spec.resources
                alloc_cpu += resources.cpu * n_run
                alloc_mem += resources.memory * n_run
        used = self.live.by_queue()
        cpu_used = sum(c for path, (c, _) in used.items() if "." not in path)
        mem_used = sum(m for path, (_, m) in used.items() if "." not in path)
        self.cluster.add(wall, [cap_cpu, alloc_cpu, cpu_used, cap_mem, alloc_mem, mem_used, running, pending])
        for row in queue_rows:
            series = self.queues.get(row.path)
            if series is None:
                series = self.queues[row.path] = Series(QUEUE, self.config)
            cpu, mem = used.get(row.path, (0.0, 0.0))
            series.add(wall, [row.dominant_share, row.guaranteed_share, cpu, mem, row.running_tasks])
