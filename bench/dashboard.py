"""Dashboard costs, measured side by side in one run (the machine is shared: ratios and
medians, no absolute assertions):

1. /metrics with 10,000 running tasks (target <= 200 ms), and what prometheus_client's
   own formatting of the same per-task series costs;
2. the job page's API calls for a 1,000-task job (target <= 100 ms);
3. history memory per running task at the default retention, rings full (<= 20 KiB);
4. heartbeat handling with history on vs off, the drain counted (target <= 1.3x): from
   the agent's bytes (decode + service, what the master does per heartbeat) and, more
   strictly, the service path alone.

    .venv/bin/python bench/dashboard.py [--tasks 10000] [--job-tasks 1000] [--nodes 100]

Prints the load average before and after: on this shared 2-core machine absolute times
move with it; the ratios are measured side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from tcluster.master.core.actions import Registration
from tcluster.master.edge.agent_codec import inbound_from_pb
from tcluster.master.usage.history import HistoryConfig, TaskRecord
from tcluster.master.usage.historydb import HistoryStore
from tcluster.master.usage.metrics import TASK_LABELS, TASK_METRICS, Exposition
from tcluster.master.usage.recorder import Recorder
from tcluster.master.service import MasterService
from tcluster.master.settings import MasterSettings
from tcluster.master.core.state import MasterState, Timeouts
from tcluster.master.store.sqlite import Store
from tcluster.master.web.app import Dashboard
from tcluster.domain.model import Job, JobSpec, Node, Task, TaskState, TaskUsage
from tcluster.domain.resources import Resources
from tcluster.v1 import agent_pb2
from tcluster.wire.protobuf import resources_to_pb, usage_to_pb

GiB = 2**30
ROW = np.array([0.3, 0.1, 0.0, 3e8, 2.5e8, 5e7, 0.0, 4.0, 0.0, 0.0], dtype=np.float32)   # one task's bucket
JOB0 = f"{0:08x}"      # job ids are 8 hex digits
TASKS_PER_NODE = 100


def usage(i: int, t: float) -> TaskUsage:
    return TaskUsage(cpu_seconds=100.0 + i, cpu_rate=0.4, cpu_user_rate=0.3, cpu_system_rate=0.1,
                     cpu_user_seconds=75.0, cpu_system_seconds=25.0, memory_bytes=(300 + i % 50) * 2**20,
                     memory_anon_bytes=250 * 2**20, memory_file_bytes=50 * 2**20, memory_peak_bytes=400 * 2**20,
                     pids=4, sampled_at=t, io_read_bytes=i * 4096)


def synthetic_state(tasks: int, job_tasks: int) -> MasterState:
    """`tasks` running tasks on nodes of 100, the first job with `job_tasks` of them."""
    nodes = [Node(f"node{n:05d}", Resources.of({"cpu": 64, "memory": 256 * GiB}))
             for n in range((tasks + TASKS_PER_NODE - 1) // TASKS_PER_NODE)]
    jobs, all_tasks, sizes = [], [], [job_tasks] + [100] * ((tasks - job_tasks) // 100)
    placed = 0
    for j, size in enumerate(sizes):
        spec = JobSpec(command=("train",), resources=Resources.of({"cpu": 0.5, "memory": GiB}), name=f"job{j}",
                       queue="default", tasks=size)
        jobs.append(Job(id=f"{j:08x}", spec=spec, submitted_at=1.0))
        for i in range(size):
            all_tasks.append(Task(f"{j:08x}", i, TaskState.RUNNING, node=nodes[placed // TASKS_PER_NODE].name,
                                  attempt=1, started_at=2.0))
            placed += 1
    state = MasterState(jobs, all_tasks, nodes, [], Timeouts(), 0.0)
    now = time.time()
    for k, task in enumerate(all_tasks):
        state.usage[task.id] = usage(k, now)
    return state


def timed(fn: Callable[[], Any], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def ms(values: list[float]) -> str:
    return f"median {1000 * statistics.median(values):.1f} ms (min {1000 * min(values):.1f})"


def service_with(state: MasterState, tmp: Path) -> MasterService:
    settings = MasterSettings(data_dir=tmp, http="127.0.0.1:0")
    service = MasterService(settings, Store(tmp / "master.db"))
    service.state = state
    return service


def bench_metrics(state: MasterState, tmp: Path) -> None:
    service = service_with(state, tmp)
    recorder = Recorder(HistoryConfig())
    exposition = Exposition(service, recorder)
    exposition.render()                      # label strings built once, as after the first scrape

    def after_heartbeats() -> bytes:         # the usual scrape: heartbeats came in since the last one
        recorder.generation += 1
        return exposition.render()
    fast = timed(after_heartbeats, 9)
    cached = timed(exposition.render, 3)
    size = len(exposition.render())
    wired = _after_decoded_heartbeats(state, after_heartbeats, 5)

    class Plain:                             # the same per-task series through prometheus_client
        def collect(self) -> Any:
            for name, text, counter, get in TASK_METRICS:
                family = CounterMetricFamily(f"tcluster_task_{name}", text, labels=TASK_LABELS)
                for task_id, u in state.usage.items():
                    task = state.task(task_id)
                    spec = state.jobs[task.job_id].spec
                    family.add_metric([task.job_id, spec.name, str(task.index), task.node, spec.queue, spec.user],
                                      get(u))
                yield family
    registry = CollectorRegistry()
    registry.register(Plain())
    plain = timed(lambda: generate_latest(registry), 1)
    print(f"/metrics, {len(state.usage)} running tasks: {ms(fast)}, {size / 2**20:.1f} MiB "
          f"(target <= 200 ms loaded, aim <= 100 ms quiet); again with no step since: {ms(cached)}; "
          f"prometheus_client formatting the per-task series alone: {ms(plain)} "
          f"({statistics.median(plain) / statistics.median(fast):.1f}x)")
    print(f"/metrics after every node's heartbeat came through the decode and the Beat step (untimed; what "
          f"a scrape reads was converted at the decode, or is converted by the scrape): {ms(wired)}")


def _after_decoded_heartbeats(state: MasterState, scrape: Callable[[], Any], runs: int) -> list[float]:
    """Each scrape after one heartbeat of every node, decoded from its bytes and applied
    (not timed): usage converted lazily is paid for in the scrape, as on a live master."""
    from tcluster.master.core.events import Beat, Now
    from tcluster.master.core.transitions import handle
    wall = time.time()
    for name in state.nodes:
        state.reattach(name, 1.0, wall)
    wire = [(name, heartbeat_bytes(state, name, wall)) for name in sorted(state.nodes)]
    out = []
    for run in range(runs):
        for name, data in wire:
            beat = inbound_from_pb(agent_pb2.AgentMessage.FromString(data))
            state.apply(handle(state, Beat(name, beat.free, beat.usage), Now(wall + run, 2.0 + run)))
        out.append(timed(scrape, 1)[0])
    return out


def bench_job_api(state: MasterState, tmp: Path, job_tasks: int) -> None:
    service = service_with(state, tmp)
    dashboard = Dashboard(service, service.settings)
    start = time.time() - 600
    recorder = dashboard.recorder
    slots = np.array([recorder.add_record(task.id, TaskRecord(JOB0, task.node, "default", 1)).slot
                      for task in state.tasks[JOB0][:40]])   # the charts' 40 tasks with 10 min of history
    for s in range(600):
        recorder.rings.add(slots, np.full(len(slots), start + s), np.tile(ROW, (len(slots), 1)))

    job_ids = [task.id for task in state.tasks[JOB0]]
    fresh = [{task_id: usage(k, start + 600 + b) for k, task_id in enumerate(job_ids)} for b in range(8)]

    async def run() -> tuple[list[float], list[float], list[float]]:
        client = TestClient(TestServer(dashboard.app()))
        await client.start_server()
        try:
            async def call(path: str) -> float:
                started = time.perf_counter()
                response = await client.get(path)
                await response.read()
                assert response.status == 200, await response.text()
                return time.perf_counter() - started
            await call(f"/api/v1/jobs/{JOB0}")
            job = []
            for beat in fresh[1:]:                 # every task sent a new sample since the last ask
                state.usage.update(beat)
                job.append(await call(f"/api/v1/jobs/{JOB0}"))
            same = [await call(f"/api/v1/jobs/{JOB0}") for _ in range(3)]
            charts = [await call(f"/api/v1/jobs/{JOB0}/usage?detail=0") for _ in range(7)]
            return job, same, charts
        finally:
            await client.close()
    job, same, charts = asyncio.run(run())
    print(f"job page API, a {job_tasks}-task job: /api/v1/jobs/ID after every task's next heartbeat {ms(job)} "
          f"(with no new sample {ms(same)}); /usage (40 tasks x 10 min) {ms(charts)} (target <= 100 ms each, loaded)")
    dashboard.store.close()


def bench_memory(tasks: int, tmp: Path) -> None:
    """Every ring full: 24 h of 5-min buckets, then 10 min of 1 s samples."""
    config = HistoryConfig()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    recorder = Recorder(config)
    now = time.time()
    slots = np.array([recorder.add_record(f"j.{i}", TaskRecord("j", "n1", "default", 1)).slot
                      for i in range(tasks)])
    rows = np.tile(ROW, (tasks, 1))
    for t in [*range(int(now - 86400), int(now - 600), int(config.long_step_s)), *range(int(now - 600), int(now))]:
        recorder.rings.add(slots, np.full(tasks, float(t)), rows)
    for record in recorder.tasks.values():
        record.ooms.append((now, 1, "n1"))
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    total = sum(s.size_diff for s in after.compare_to(before, "filename"))
    print(f"history memory at the default retention ({config.recent_s:.0f} s at the heartbeat, "
          f"{config.long_s:.0f} s in {config.long_step_s:.0f} s buckets), rings full: "
          f"{total / tasks / 1024:.1f} KiB per running task (target <= 20 KiB)")
    store = HistoryStore(tmp / "history.db", config)
    first = timed(lambda: store.flush(recorder), 1)
    for t in range(int(now), int(now) + 30):      # 30 s more of samples: what a periodic flush writes
        recorder.rings.add(slots, np.full(tasks, float(t)), rows)
    batches: list[Any] = []
    on_loop = timed(lambda: batches.append(store.collect(recorder, len(batches), 30)), 30)
    in_thread = [sum(timed(lambda: store.write(b), 1)) for b in batches]
    store.close()
    print(f"history flush of {tasks} running tasks (whole rings the first time: {ms(first)}); then every 30 s "
          f"in 30 one-second parts: on the loop {1000 * max(on_loop):.1f} ms at most per part "
          f"({1e6 * sum(on_loop) / tasks:.0f} us per task), in the writer thread {1000 * sum(in_thread):.0f} ms in all")


def heartbeat_bytes(state: MasterState, node: str, t: float) -> bytes:
    """A node's heartbeat as its agent sends it (sampled_at 0: the master's clock buckets it)."""
    usage_pb = [usage_to_pb(replace(usage(k, 0.0), memory_inactive_file_bytes=20 * 2**20), task_id, 1)
                for k, task_id in enumerate(sorted(state.by_node.get(node, ())))]
    beat = agent_pb2.Heartbeat(free=resources_to_pb(Resources.of({"cpu": 14, "memory": 150 * GiB})), usage=usage_pb,
                               sent_at=t)
    return agent_pb2.AgentMessage(heartbeat=beat).SerializeToString()


class HeartbeatRig:
    """`nodes` agents of 100 tasks attached to a service; each round every node beats once
    and (history on) the recorder drains, as the dashboard loop does every second."""


    def __init__(self, tmp: Path, nodes: int) -> None:
        state = self.state = synthetic_state(nodes * TASKS_PER_NODE, TASKS_PER_NODE)
        self.service = service_with(state, tmp)
        links = {}
        for name, node in state.nodes.items():
            running = tuple((task_id, 1) for task_id in sorted(state.by_node.get(name, ())))
            links[name] = self.service.agents.attach(Registration(name, node.capacity, Resources(), (), "bench", running))
        self.wire = [(links[name], heartbeat_bytes(state, name, 0.0)) for name in state.nodes]
        self.decoded = [(link, inbound_from_pb(agent_pb2.AgentMessage.FromString(data))) for link, data in self.wire]
        self.clock = self.history_time = time.time()
        self.service.clock = lambda: self.clock     # one beat per node per second, in history's time

    def round(self, observer: Recorder | None, from_wire: bool) -> tuple[float, float]:
        """One beat of every node, then (history on) the drain: (seconds in beats, in the drain)."""
        self.service.plugins.observer = observer
        self.service.plugins.listeners = [observer] if observer is not None else []
        if observer is not None:
            self.history_time += 1.0            # rounds without history leave no gap in it
        self.clock = self.history_time
        started = time.perf_counter()
        if from_wire:
            for link, data in self.wire:
                self.service.agents.on_heartbeat(link, inbound_from_pb(agent_pb2.AgentMessage.FromString(data)))
        else:
            for link, beat in self.decoded:
                self.service.agents.on_heartbeat(link, beat)
        beats = time.perf_counter() - started
        drain = 0.0
        if observer is not None:
            started = time.perf_counter()
            observer.drain(self.state)
            drain = time.perf_counter() - started
        self.service.plugins.observer = None
        self.service.plugins.listeners = []
        return beats, drain


def bench_heartbeats(tmp: Path, nodes: int, rounds: int) -> None:
    """History off and on in alternate rounds (so the machine's noise hits both alike), the
    same messages; the ratio of the sums and the median of the per-pair ratios."""
    rig, recorder = HeartbeatRig(tmp, nodes), Recorder(HistoryConfig(step_s=1.0))
    rig.round(recorder, True)                 # every task has its slot, as after its first beat
    for from_wire in (True, False):
        off, on, drain = [], [], []
        for _ in range(rounds):
            off.append(rig.round(None, from_wire)[0])
            beats, drained = rig.round(recorder, from_wire)
            on.append(beats)
            drain.append(drained)
        per = lambda xs: 1e6 * sum(xs) / (rounds * nodes)     # noqa: E731
        pairs = statistics.median((b + d) / o for o, b, d in zip(off, on, drain))
        what = "from the wire (decode + service)" if from_wire else "the service alone (beats decoded beforehand)"
        print(f"heartbeat handling, {what}, {nodes} nodes x {TASKS_PER_NODE} tasks, a drain per round of beats, "
              f"{rounds} rounds each: history off {per(off):.0f} us per beat, on {per(on):.0f} us + drain "
              f"{per(drain):.0f} us -> {sum(on) / sum(off):.2f}x on the heartbeat path, "
              f"{(sum(on) + sum(drain)) / sum(off):.2f}x all told, median of rounds {pairs:.2f}x (target <= 1.3x)")


async def _on_loop(fn: Callable[..., None], *args: Any) -> None:
    fn(*args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--job-tasks", type=int, default=1_000)
    parser.add_argument("--memory-tasks", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=100, help="heartbeat bench: agents of 100 tasks")
    parser.add_argument("--rounds", type=int, default=40, help="heartbeat bench: rounds with and without history")
    args = parse_quick(parser, {"tasks": 200, "job_tasks": 50, "memory_tasks": 20, "nodes": 3, "rounds": 2})
    print("load average (1, 5, 15 min) before: %.2f %.2f %.2f" % os.getloadavg())
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        state = synthetic_state(args.tasks, args.job_tasks)
        (tmp / "m").mkdir(), (tmp / "j").mkdir(), (tmp / "h").mkdir()
        bench_metrics(state, tmp / "m")
        bench_job_api(state, tmp / "j", args.job_tasks)
        (tmp / "s").mkdir()
        bench_memory(args.memory_tasks, tmp / "s")
        asyncio.run(_on_loop(bench_heartbeats, tmp / "h", args.nodes, args.rounds))   # the committer needs a running loop
    print("load average (1, 5, 15 min) after: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
