"""`/metrics`: a prometheus_client custom collector over the master's state, plus a
direct renderer for the per-task series.

Nothing is counted per sample: each scrape reads the newest usage the master already
keeps (state.usage), the node matrix, the queue rows and the recorder's counters. Names
mirror cAdvisor's container_* series (base units, `_total` counters), so PromQL habits
transfer: `rate(tcluster_task_cpu_usage_seconds_total[1m])`,
`tcluster_task_memory_working_set_bytes / tcluster_task_memory_limit_bytes`.

`tcluster_oom_kills_total{node,queue}` lives in the recorder (persisted), not on the task,
so it never drops when an OOM-killed task's series disappears (cAdvisor issue 3015).

Per-task series are written by `TaskSeriesRenderer` in the same text format: measured
here, prometheus_client formats about 20 us per sample, so 10,000 tasks x 16 series took
3.4 s; with each task's label string built once (and kept while the task stays on its
node) the same text takes a fraction of that (bench/dashboard.py). The test parses the
whole output with prometheus_client's own parser."""

from __future__ import annotations

import time
from operator import attrgetter
from typing import Any, Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from tcluster.master.usage.recorder import ROUND_BUCKETS, Recorder
from tcluster.domain.gpuusage import DCGM_SERIES, TASK_GPU_SERIES
from tcluster.master.usage.opsmetrics import Outcomes, ops_registry
from tcluster.domain.model import JobState, NodeState
from tcluster.domain.nodeorders import shown_state
from tcluster.domain.taskusage import USAGE_FIELDS

TASK_LABELS = ["job_id", "job_name", "task", "node", "queue", "user"]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# (name, help, counter?, value of a TaskUsage): the table's fields that have a series
TASK_METRICS: list[tuple[str, str, bool, Callable[[object], float]]] = [
    (f.metric.name, f.metric.help, f.metric.counter, attrgetter(f.name)) for f in USAGE_FIELDS if f.metric is not None]


class MasterCollector(Collector):
    def __init__(self, service: Any, recorder: Recorder, dcgm_gpu_metrics: bool = False) -> None:
        self.service, self.recorder, self.dcgm_gpu_metrics = service, recorder, dcgm_gpu_metrics

    def describe(self) -> list[Metric]:
        return []          # no collect() at registration: the state may not be ready yet

    def collect(self) -> Iterator[Metric]:
        state = self.service.state
        yield from self._nodes(state)
        yield from self._node_ops(state)
        yield from self._queues()
        yield from self._scheduler(state)
        yield from self._preemption()
        yield from self._gpus()

    def _gpus(self) -> Iterator[Metric]:
        """The GPUs of running tasks, where agents read NVML (none elsewhere: no series rather
        than zeros), as tcluster_task_gpu_*. With --dcgm-gpu-metrics also under DCGM's names
        (`Hostname` the node, as its exporter labels it): off by default, since a site that
        runs dcgm-exporter too would count each GPU twice under the same names."""
        board = getattr(self.service, "gpus", None)
        samples = board.items() if board is not None else []
        if not samples:
            return
        for name, text, value in TASK_GPU_SERIES:
            family = GaugeMetricFamily(name, text, labels=["gpu", "node", "job_id", "task"])
            for node, s in samples:
                family.add_metric([str(s.index), node, s.task_id.rpartition(".")[0], s.task_id], value(s))
            yield family
        for name, text, value in DCGM_SERIES if self.dcgm_gpu_metrics else ():
            family = GaugeMetricFamily(name, text, labels=["gpu", "Hostname", "job_id", "task"])
            for node, s in samples:
                family.add_metric([str(s.index), node, s.task_id.rpartition(".")[0], s.task_id], value(s))
            yield family

    def _nodes(self, state: Any) -> Iterator[Metric]:
        gauges = {key: GaugeMetricFamily(f"tcluster_node_{key}", text, labels=["node"]) for key, text in [
            ("cpu_capacity_cores", "CPU cores tasks may use"), ("cpu_allocated_cores", "CPU cores requested by tasks"),
            ("cpu_free_cores", "CPU cores free for new tasks"),
            ("memory_capacity_bytes", "memory tasks may use"), ("memory_allocated_bytes", "memory requested by tasks"),
            ("memory_free_bytes", "memory free for new tasks"), ("up", "1 if READY and connected"),
            ("tasks", "tasks holding resources")]}
        for name, node in sorted(state.nodes.items()):
            free = state.free(name)
            values = {"cpu_capacity_cores": node.capacity.cpu, "cpu_free_cores": free.cpu,
                      "cpu_allocated_cores": max(0.0, node.capacity.cpu - free.cpu),
                      "memory_capacity_bytes": node.capacity.memory, "memory_free_bytes": free.memory,
                      "memory_allocated_bytes": max(0.0, node.capacity.memory - free.memory),
                      "up": float(state.connected(name) and node.state.value == "READY"),
                      "tasks": len(state.by_node.get(name, ()))}
            for key, value in values.items():
                gauges[key].add_metric([name], value)
        yield from gauges.values()
        ooms = CounterMetricFamily("tcluster_oom_kills", "OOM kills in task containers (never reset)",
                                   labels=["node", "queue"])
        for (node, queue), kills in sorted(self.recorder.oom_kills.items()):
            ooms.add_metric([node, queue], kills)
        yield ooms

    def _node_ops(self, state: Any) -> Iterator[Metric]:
        """Node operations: one series per node and state (1 for the state it is in, as
        kube-state-metrics does), how long drains took or take, and the deadline's requeues."""
        states = GaugeMetricFamily("tcluster_node_state", "1 for the state the node is in (DOWN while its agent "
                                   "is away), 0 for the others", labels=["node", "state"])
        drains = GaugeMetricFamily("tcluster_node_drain_seconds", "how long the drain has taken (DRAINING) or took "
                                   "(DRAINED)", labels=["node"])
        now = getattr(self.service, "clock", time.time)()
        for name, node in sorted(state.nodes.items()):
            shown = shown_state(node.state, node.ops, state.connected(name))
            for each in NodeState:
                states.add_metric([name, each.value], float(each is shown))
            if node.ops.since:
                end = node.ops.at if node.ops.state is NodeState.DRAINED else now
                drains.add_metric([name], max(end - node.ops.since, 0.0))
        yield states
        yield drains
        counters = getattr(self.service, "node_counters", None)
        yield CounterMetricFamily("tcluster_node_drain_requeues", "tasks a drain's deadline stopped and requeued",
                                  value=counters.drain_requeues if counters is not None else 0)

    def _queues(self) -> Iterator[Metric]:
        every = [r for r in self.service.list_queues() if r.path]
        rows = [r for r in every if not r.user]     # a user's row is not a queue
        specs = [("guaranteed_share", "share guaranteed when every queue is busy", lambda r: r.guaranteed_share),
                 ("dominant_share", "dominant share of READY capacity held now", lambda r: r.dominant_share),
                 ("running_tasks", "tasks running", lambda r: r.running_tasks),
                 ("pending_tasks", "tasks waiting", lambda r: r.pending_tasks)]
        for key, text, get in specs:
            family = GaugeMetricFamily(f"tcluster_queue_{key}", text, labels=["queue", "leaf"])
            for row in rows:
                family.add_metric([row.path, str(row.leaf).lower()], get(row))
            yield family
        decayed = GaugeMetricFamily("tcluster_queue_decayed_usage", "decayed dominant usage in share-seconds "
                                    "(--usage-half-life; 0 without), of each queue and each user in its leaf",
                                    labels=["queue", "user"])
        for row in every:
            decayed.add_metric([row.parent if row.user else row.path, row.user], row.decayed_usage_s)
        yield decayed

    def _scheduler(self, state: Any) -> Iterator[Metric]:
        stats = self.recorder.scheduler
        yield CounterMetricFamily("tcluster_scheduler_rounds", "scheduling rounds that had pending tasks",
                                  value=stats.rounds)
        yield CounterMetricFamily("tcluster_scheduler_placements", "tasks placed on nodes", value=stats.placements)
        cumulative, buckets = 0, []
        for bound, count in zip([*map(str, ROUND_BUCKETS), "+Inf"], stats.round_buckets):
            cumulative += count
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily("tcluster_scheduler_round_duration_seconds", "time of one scheduling round",
                                    buckets=buckets, sum_value=stats.round_seconds_sum)
        jobs = GaugeMetricFamily("tcluster_jobs", "jobs kept by the master, by state", labels=["state"])
        counts = {s.value: 0 for s in JobState}
        for job in state.jobs.values():
            counts[job.state.value] += 1
        for name, count in counts.items():
            jobs.add_metric([name], count)
        yield jobs
        yield GaugeMetricFamily("tcluster_pending_jobs", "jobs with tasks waiting", value=len(state.pending_jobs))

    def _preemption(self) -> Iterator[Metric]:
        """--preemption's counters (absent without it: no series that can only be zero)."""
        live = getattr(self.service, "preemption", None)
        if live is None:
            return
        counters = live.counters
        done = CounterMetricFamily("tcluster_preemptions", "tasks preempted to restore a queue's share",
                                   labels=["preemptor_queue", "victim_queue"])
        for (preemptor, victim), count in sorted(counters.preemptions.items()):
            done.add_metric([preemptor, victim], count)
        yield done
        yield CounterMetricFamily("tcluster_preempted_cpu_seconds", "CPU time the preempted attempts had used",
                                  value=counters.cpu_seconds)
        blocked = CounterMetricFamily("tcluster_preemption_blocked",
                                      "rounds x waiting jobs a queue below its share reclaimed nothing for, by reason",
                                      labels=["reason"])
        for reason in ("exempt", "protected", "final_share", "at_target", "gang", "rate_limit", "no_fit"):
            blocked.add_metric([reason], counters.blocked.get(reason, 0))
        yield blocked
        starved = GaugeMetricFamily("tcluster_queue_starved_seconds", "how long each queue has been below its "
                                    "share with work waiting", labels=["queue"])
        now = self.service.clock()
        for queue, since in sorted(live.starved_since.items()):
            starved.add_metric([queue], max(now - since, 0.0))
        yield starved


_SPEC_METRICS: list[tuple[str, str, Callable[[object], float]]] = [
    ("memory_limit_bytes", "memory limit of the container", lambda s: s.resources.memory),
    ("cpu_request_cores", "CPU cores the task asked for", lambda s: s.resources.cpu),
]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class TaskSeriesRenderer:
    """The per-task families as exposition text. Per task, the label string and the lines
    of the series fixed by its spec (limit, request) are built once and kept until the
    recorder says the task changed (placed again, ended); only the usage values are
    formatted at each scrape, one f-string per sample."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._cache: dict[str, tuple[str, list[str]]] = {}   # task id -> ("{labels} ", spec lines)

    def _entry(self, state: Any, task_id: str) -> tuple[str, list[str]] | None:
        task = state.task(task_id)
        if task is None:
            return None
        spec = state.jobs[task.job_id].spec
        values = [task.job_id, spec.name, str(task.index), task.node, spec.queue, spec.user]
        labels = "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in zip(TASK_LABELS, values)) + "} "
        lines = [f"tcluster_task_{name}{labels}{get(spec)}\n" for name, _, get in _SPEC_METRICS]
        entry = self._cache[task_id] = (labels, lines)
        return entry

    def _entries(self, state: Any) -> tuple[list[str], list[object], list[list[str]]]:
        changed = self.recorder.take_changed_tasks()
        if changed is None:
            self._cache.clear()
        for task_id in changed or ():
            self._cache.pop(task_id, None)
        ids, usages = list(state.usage), list(state.usage.values())
        entries = list(map(self._cache.get, ids))
        if None in entries:                 # tasks seen first (or changed): their labels once
            entries = [e if e is not None else self._entry(state, i) for i, e in zip(ids, entries)]
            if None in entries:
                usages = [u for u, e in zip(usages, entries) if e is not None]
                entries = [e for e in entries if e is not None]
        if len(self._cache) > 2 * len(entries) + 1000:        # forget tasks that ended
            self._cache = {k: v for k, v in self._cache.items() if k in state.usage}
        return [e[0] for e in entries], usages, [e[1] for e in entries]

    def render(self, state: Any) -> str:
        labels, usages, fixed = self._entries(state)
        out: list[str] = []
        for name, text, counter, get in TASK_METRICS:
            series = f"tcluster_task_{name}" + ("_total" if counter else "")
            out.append(f"# HELP {series} {text}\n# TYPE {series} {'counter' if counter else 'gauge'}\n")
            # One f-string per sample, ints left as ints: that cost decides what 10,000 tasks take
            # (measured: as fast as one join over slice-assigned [name, labels, value, ...] parts)
            out.append("".join([f"{series}{lbl}{value}\n" for lbl, value in zip(labels, map(get, usages))]))
        for i, (name, text, _) in enumerate(_SPEC_METRICS):
            out.append(f"# HELP tcluster_task_{name} {text}\n# TYPE tcluster_task_{name} gauge\n")
            out.append("".join([lines[i] for lines in fixed]))
        return "".join(out)


class Exposition:
    """The whole /metrics text: the collector's families, then the per-task ones."""

    def __init__(self, service: Any, recorder: Recorder, task_metrics: bool = True,
                 outcomes: Outcomes | None = None, dcgm_gpu_metrics: bool = False) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(MasterCollector(service, recorder, dcgm_gpu_metrics))
        self.outcomes = Outcomes() if outcomes is None else outcomes
        self.ops = ops_registry(service, self.outcomes)      # process and build series: fresh each scrape
        self.service, self.recorder = service, recorder
        self.tasks = TaskSeriesRenderer(recorder) if task_metrics else None
        self._made: tuple[int, int] | None = None
        self._text = b""

    def render(self) -> bytes:
        """Made again only when a step or a scheduling round happened since (a second
        Prometheus, or one scraping faster than the heartbeats, gets the same bytes)."""
        made = (self.recorder.generation, id(self.service.state))
        if made != self._made:
            text = generate_latest(self.registry)
            if self.tasks is not None:
                text += self.tasks.render(self.service.state).encode()
            self._made, self._text = made, text
        return generate_latest(self.ops) + self._text
