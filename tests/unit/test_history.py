"""The usage history: bfloat16 rings, downsampling, windows, OOM events, persistence."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from tcluster.master.core.events import Beat, Now, Step
from tcluster.master.core.feed import AppliedStep
from tcluster.master.usage.history import TASK, HistoryConfig, Schema, Series, Tier, from_bf16, to_bf16, MAX, MEAN
from tcluster.master.usage.historydb import HistoryStore
from tcluster.master.usage.recorder import Recorder
from tcluster.master.core.state import MasterState, Timeouts
from tcluster.domain.model import Job, JobSpec, Node, Task, TaskState, TaskUsage
from tcluster.domain.resources import Resources
from tcluster.master.core.usageblock import UsageBlock

GiB = 2**30


def test_bfloat16_keeps_three_significant_digits_over_any_range() -> None:
    values = np.array([0.0, 0.25, 1.5, 3.7, 1234.0, 1 * GiB, 3.3 * GiB, 1e12], dtype=np.float32)
    back = from_bf16(to_bf16(values))
    assert np.all(np.abs(back - values) <= values * 0.004)
    assert np.isnan(from_bf16(to_bf16(np.array([np.nan]))))[0]


def test_a_bucket_keeps_the_mean_of_rates_and_the_max_of_levels() -> None:
    schema = Schema(("rate", "level"), (MEAN, MAX))
    tier = Tier(10.0, 6, schema)
    for t, rate, level in [(100.0, 1.0, 5.0), (103.0, 3.0, 9.0), (109.9, 2.0, 7.0), (111.0, 8.0, 1.0)]:
        tier.add(t, [rate, level])
    times, rows = tier.read(0, 1e9)
    assert times.tolist() == [100.0, 110.0]
    assert rows.tolist() == [[2.0, 9.0], [8.0, 1.0]]


def test_a_ring_forgets_what_falls_out_of_its_window_and_shows_gaps() -> None:
    tier = Tier(1.0, 5, Schema(("x",), (MAX,)))
    for t in range(10):
        tier.add(float(t), [float(t)])
    times, rows = tier.read(0, 100)
    assert times.tolist() == [5.0, 6.0, 7.0, 8.0, 9.0]
    tier.add(12.0, [12.0])                    # nothing at 10 and 11: a gap, not old values
    times, _ = tier.read(0, 100)
    assert times.tolist() == [8.0, 9.0, 12.0]
    assert tier.data.nbytes == 5 * 2


def test_series_reads_coarse_buckets_then_the_recent_tier() -> None:
    series = Series(Schema(("x",), (MEAN,)), HistoryConfig(step_s=1.0, recent_s=60, long_step_s=10, long_s=3600))
    for t in range(0, 600):
        series.add(float(t), [float(t % 20)])
    recent = series.read(600 - 30, 600)
    assert recent["step_s"] == 1.0 and len(recent["t"]) == 30
    whole = series.read(0, 600)               # 10 s buckets until the recent tier's first second
    assert whole["t"][:3] == [0.0, 10.0, 20.0] and whole["x"][0] == pytest.approx(4.5)
    assert whole["t"][-60:] == [float(t) for t in range(540, 600)] and whole["t"][-61] == 530.0
    assert whole["t"] == sorted(whole["t"])


def _state() -> MasterState:
    spec = JobSpec(command=("x",), resources=Resources.of({"cpu": 1, "memory": GiB}), queue="a.b", name="burn")
    job = Job(id="j1", spec=spec, submitted_at=1.0)
    tasks = [Task("j1", i, TaskState.RUNNING, node="n1", attempt=1) for i in range(2)]
    node = Node("n1", Resources.of({"cpu": 4, "memory": 8 * GiB}))
    return MasterState([job], tasks, [node], [], Timeouts(), 0.0)


def _usage(t: float, cpu_s: float, memory: int, cache: int, ooms: int = 0, io: int = 0) -> TaskUsage:
    return TaskUsage(cpu_seconds=cpu_s, cpu_rate=1.0, cpu_user_rate=0.75, cpu_system_rate=0.25,
                     memory_bytes=memory, memory_file_bytes=cache, memory_anon_bytes=memory - cache,
                     sampled_at=t, oom_kills=ooms, io_read_bytes=io, pids=3)


def _beat(rec: Recorder, state: MasterState, t: float, usage: dict[str, TaskUsage]) -> None:
    block = UsageBlock.of({k: (1, u) for k, u in usage.items()})
    rec.on_step(AppliedStep(Beat("n1", Resources(), block), Step(usage=block), Now(t, t)))


def test_recorder_derives_working_set_rates_node_series_and_oom_events() -> None:
    state, rec = _state(), Recorder(HistoryConfig(step_s=1.0))
    for i in range(5):
        t = 1000.0 + i
        _beat(rec, state, t, {"j1.0": _usage(t, i, 300 * 2**20, 100 * 2**20, ooms=1 if i >= 3 else 0, io=i * 4096),
                              "j1.1": _usage(t, i, 50 * 2**20, 0)})
    rec.drain(state)
    data = rec.tasks["j1.0"].series.read(995, 2000)   # the recent tier
    assert data["memory_working_set"][-1] == pytest.approx(200 * 2**20, rel=0.005)
    assert data["memory_cache"][-1] == pytest.approx(100 * 2**20, rel=0.005)
    assert data["io_read"][-1] == pytest.approx(4096)
    assert data["cpu_user"][-1] == 0.75
    assert rec.tasks["j1.0"].ooms == [(1003.0, 1, "n1")]
    assert rec.oom_kills[("n1", "a.b")] == 1
    node = rec.nodes["n1"].read(995, 2000)
    assert node["cpu_used"][-1] == 2.0 and node["cpu_allocated"][-1] == 2.0 and node["cpu_capacity"][-1] == 4.0
    assert node["tasks"][-1] == 2


def test_an_oom_exit_the_heartbeats_missed_is_still_an_event_and_counted_once() -> None:
    state, rec = _state(), Recorder(HistoryConfig())
    _beat(rec, state, 10.0, {"j1.0": _usage(10.0, 1, GiB // 2, 0)})
    ended = Task("j1", 0, TaskState.FAILED, node="n1", attempt=1, reason="OOMKilled", finished_at=11.5,
                 usage=_usage(11.0, 1, GiB, 0, ooms=1))
    rec.on_step(AppliedStep(object(), Step(tasks={"j1.0": ended}), Now(11.6, 11.6)))
    rec.drain(state)
    assert rec.tasks["j1.0"].ooms == [(11.5, 1, "n1")] and rec.tasks["j1.0"].ended
    assert rec.oom_kills[("n1", "a.b")] == 1


def test_history_survives_a_restart_and_a_finished_task_is_read_back(tmp_path: Path) -> None:
    config = HistoryConfig(step_s=1.0)
    state, rec = _state(), Recorder(config)
    store = HistoryStore(tmp_path / "history.db", config)
    for i in range(20):
        _beat(rec, state, 100.0 + i, {"j1.0": _usage(100.0 + i, i, (i + 1) * 2**20, 0),
                                      "j1.1": _usage(100.0 + i, i, 2**20, 0)})
    rec.drain(state)
    rec.sample_cluster(120.0, state, [])
    assert store.flush(rec) == 4                 # two tasks, the node, the cluster: one batch
    ended = Task("j1", 1, TaskState.SUCCEEDED, node="n1", attempt=1, finished_at=121.0)
    rec.on_step(AppliedStep(object(), Step(tasks={"j1.1": ended}), Now(121.0, 121.0)))
    rec.drain(state)
    store.flush(rec)
    assert "j1.1" not in rec.tasks               # finished: out of memory, on disk
    store.close()

    again = Recorder(config)
    store = HistoryStore(tmp_path / "history.db", config)
    store.restore(again, {"j1.0"})
    before = rec.tasks["j1.0"].series.read(0, 1e9)
    assert again.tasks["j1.0"].series.read(0, 1e9) == before
    assert again.nodes["n1"].read(0, 1e9)["memory_used"] == rec.nodes["n1"].read(0, 1e9)["memory_used"]
    finished = store.load_task("j1.1")
    assert finished is not None and finished.ended and len(finished.series.read(0, 1e9)["t"]) == 20
    again.forgotten.add("j1")
    store.flush(again)
    assert store.load_task("j1.1") is None
    store.close()


def test_a_task_killed_before_its_first_sample_keeps_its_oom_once_it_is_on_disk(tmp_path: Path) -> None:
    """A task OOM-killed before any heartbeat carried its usage has an OOM event and no
    samples: once flushed and out of memory it is still read back, with the event (the job
    page's OOM marker; CI of 2c548f9 lost it when the record held no chunks)."""
    config = HistoryConfig(step_s=1.0)
    state, rec = _state(), Recorder(config)
    store = HistoryStore(tmp_path / "history.db", config)
    ended = Task("j1", 0, TaskState.FAILED, node="n1", attempt=1, reason="OOMKilled", finished_at=11.5,
                 usage=_usage(11.0, 1, GiB, 0, ooms=1))
    rec.on_step(AppliedStep(object(), Step(tasks={"j1.0": ended}), Now(11.6, 11.6)))
    rec.drain(state)
    store.flush(rec)
    assert "j1.0" not in rec.tasks
    finished = store.load_task("j1.0")
    assert finished is not None and finished.ended and finished.ooms == [(11.5, 1, "n1")]
    assert finished.series.read(0, 1e9)["t"] == []
    assert store.load_task("j1.9") is None
    store.close()


def test_task_history_fits_the_memory_budget_at_default_retention() -> None:
    series = Series(TASK, HistoryConfig())
    assert sum(t.nbytes() for t in series.tiers) <= 18 * 1024


def _recorded(samples: list[list]) -> dict:
    """The history of task j1.0 after heartbeats of these wire samples, one beat a second."""
    from tcluster.master.edge.agent_codec import usage_block_from_pb
    state, rec = _state(), Recorder(HistoryConfig(step_s=1.0))
    for i, sample in enumerate(samples):
        block = usage_block_from_pb(sample)
        rec.on_step(AppliedStep(Beat("n1", Resources(), block), Step(usage=block), Now(1000.0 + i, 1000.0 + i)))
    rec.drain(state)
    return rec.tasks["j1.0"].series.read(995, 2000)


def test_the_agents_rates_go_into_the_history_as_sent() -> None:
    from tcluster.wire.protobuf import usage_to_pb
    sent = [usage_to_pb(TaskUsage(sampled_at=1000.0 + i, io_read_bytes=i * 10**6, io_read_rate=4096.0,
                                  io_write_rate=0.0, cpu_throttled_rate=0.25), "j1.0", 1) for i in range(4)]
    data = _recorded([[s] for s in sent])
    assert data["io_read"][-1] == 4096 and data["io_write"][-1] == 0 and data["cpu_throttled"][-1] == 0.25


def test_an_agent_of_the_previous_version_sends_no_rates_and_the_master_derives_them() -> None:
    """A rolling upgrade: the old agent's samples carry the counters only (fields 27-30 unset)."""
    from tcluster.v1 import common_pb2
    old = [common_pb2.TaskUsage(task_id="j1.0", attempt=1, sampled_at=1000.0 + i, io_read_bytes=i * 4096,
                                io_write_bytes=i * 1024, cpu_throttled_seconds=i * 0.5) for i in range(4)]
    assert not old[0].rates_derived
    data = _recorded([[s] for s in old])
    assert data["io_read"][-1] == 4096 and data["io_write"][-1] == 1024 and data["cpu_throttled"][-1] == 0.5


def test_a_flush_in_parts_writes_each_changed_series_once_per_period(tmp_path: Path) -> None:
    """collect(part, parts) picks a series by its (cached) part before reading its dirty
    flag: over `parts` ticks every changed series is written exactly once, and one not yet
    picked stays dirty for its own tick."""
    config = HistoryConfig(step_s=1.0)
    state, rec = _state(), Recorder(config)
    store = HistoryStore(tmp_path / "history.db", config)
    _beat(rec, state, 100.0, {"j1.0": _usage(100.0, 1, 2**20, 0), "j1.1": _usage(100.0, 1, 2**20, 0)})
    rec.drain(state)
    rec.sample_cluster(100.0, state, [])
    parts, written = 7, []
    for part in range(parts):
        batch = store.collect(rec, part, parts)
        written += [key for key, tier, *_ in batch.chunks if tier == 0]
        store.finish(rec, batch, store.write(batch))
    assert sorted(written) == ["cluster", "node:n1", "task:j1.0", "task:j1.1"]
    assert not any(r.series.dirty for r in rec.tasks.values()) and not rec.cluster.dirty
    assert store.collect(rec, 0, parts).chunks == []      # nothing changed since
    store.close()


def test_the_batched_prune_drops_the_same_chunks_as_one_delete_each(tmp_path: Path) -> None:
    """_prune (64 series to a statement) against the plain DELETE per (key, tier, last)."""
    import random
    import sqlite3
    from tcluster.master.usage.historydb import _SCHEMA, _prune
    rng = random.Random(38)
    rows = [(f"task:j.{k}", tier, first, first + 9, b"x") for k in range(150) for tier in (0, 1)
            for first in range(0, 100, 10)]
    prune = [(f"task:j.{k}", tier, rng.randrange(-5, 110)) for k in range(0, 150, 2) for tier in (0, 1)]
    kept = []
    for how in ("one by one", "batched"):
        db = sqlite3.connect(tmp_path / f"{how}.db")
        db.executescript(_SCHEMA)
        db.executemany("INSERT INTO chunks VALUES (?,?,?,?,?)", rows)
        if how == "batched":
            _prune(db, prune)
        else:
            db.executemany("DELETE FROM chunks WHERE key=? AND tier=? AND last <= ?", prune)
        kept.append(sorted(db.execute("SELECT key, tier, first FROM chunks").fetchall()))
        db.close()
    assert kept[0] == kept[1] and len(kept[0]) < len(rows)


def _per_task_sums(state: MasterState) -> dict[str, tuple[float, float]]:
    """The cluster sample's queue sums as they were computed before LiveUsage: task by
    task, from each running task's newest sample in the state."""
    used: dict[str, tuple[float, float]] = {}
    for job_id, tasks in state.tasks.items():
        for task in tasks:
            if task.id not in state.usage:
                continue
            usage = state.usage[task.id]
            found = (usage.cpu_rate, usage.working_set_bytes)
            parts = state.jobs[job_id].spec.queue.split(".")
            for depth in range(1, len(parts) + 1):
                path = ".".join(parts[:depth])
                c, m = used.get(path, (0.0, 0.0))
                used[path] = (c + found[0], m + found[1])
    return used


def test_the_queue_sums_from_the_slots_are_the_per_task_sums_through_ends_and_retries() -> None:
    """Drained every other second: a task requeued and placed again reports its next attempt
    in the same drain as its end (a drain ingests beats before ends)."""
    state, rec = _churn_state(), Recorder(HistoryConfig(step_s=1.0))

    def drained(second: int) -> None:
        if second % 2 == 0:
            rec.drain(state)
            got, want = rec.live.by_queue(), _per_task_sums(state)
            assert set(want) <= set(got)
            for path in got:
                assert got[path] == pytest.approx(want.get(path, (0.0, 0.0))), (second, path)

    _run_churn(state, [rec], random.Random(7), drained)   # ten ends and ten requeues
    rec.drain(state)                 # the last second's beats: a sample reads what was drained
    rec.sample_cluster(200.0, state, [])
    row = rec.cluster.read(0, 1e9)
    assert row["cpu_used"][-1] == pytest.approx(sum(c for p, (c, _) in _per_task_sums(state).items() if "." not in p),
                                                rel=0.01)


def _churn_state() -> MasterState:
    """20 running tasks in four queues on two nodes."""
    queues = ["a.b", "a.c", "d", "a.b.e"]
    jobs = [Job(id=f"j{q}", spec=JobSpec(command=("x",), resources=Resources.of({"cpu": 1, "memory": GiB}), queue=queue),
                submitted_at=1.0) for q, queue in enumerate(queues)]
    tasks = [Task(job.id, i, TaskState.RUNNING, node=f"n{i % 2}", attempt=1) for job in jobs for i in range(5)]
    nodes = [Node(f"n{i}", Resources.of({"cpu": 64, "memory": 64 * GiB})) for i in range(2)]
    return MasterState(jobs, tasks, nodes, [], Timeouts(), 0.0)


def _run_churn(state: MasterState, recorders: list[Recorder], rng: random.Random,
               between: Callable[[int], None]) -> None:
    """40 seconds of heartbeats; every 4 s one task ends and another is requeued and placed
    again at once (its next attempt reports on the other node); `between` after each second."""
    for second in range(40):
        wall = 100.0 + second
        for node in ("n0", "n1"):
            mine = [t for ts in state.tasks.values() for t in ts if t.node == node and t.state is TaskState.RUNNING]
            usage = {t.id: (t.attempt, replace(_usage(wall, second, rng.randrange(1, 2**30), rng.randrange(2**20)),
                                               cpu_rate=rng.random() * 4)) for t in mine if rng.random() < 0.9}
            block = UsageBlock.of(usage)
            state.usage.put(block)
            for rec in recorders:
                rec.on_step(AppliedStep(Beat(node, Resources(), block), Step(usage=block), Now(wall, wall)))
        if second % 4 == 3:
            running = [t for ts in state.tasks.values() for t in ts if t.state is TaskState.RUNNING]
            done, again = rng.sample(running, 2)
            for task, new_state in ((done, TaskState.SUCCEEDED), (again, TaskState.PENDING)):
                changed = replace(task, state=new_state, finished_at=wall)
                state.apply(Step(tasks={task.id: changed}))
                for rec in recorders:
                    rec.on_step(AppliedStep(object(), Step(tasks={task.id: changed}), Now(wall, wall)))
            state.apply(Step(tasks={again.id: replace(again, state=TaskState.RUNNING, node="n1",
                                                      attempt=again.attempt + 1)}))
        between(second)


def test_a_drain_in_parts_gives_what_whole_drains_give_with_reads_and_new_beats_between_parts() -> None:
    """The dashboard drains in parts (issue 38); steps keep arriving between parts, and a read
    drains the rest at once. Every task's series, the live queue sums and the records are
    those of whole drains, and the queue sums are the per-task sums at every read."""
    state = _churn_state()
    whole, parts = Recorder(HistoryConfig(step_s=1.0)), Recorder(HistoryConfig(step_s=1.0))
    sizes = random.Random(3)
    left_part_way = 0

    def between(second: int) -> None:
        nonlocal left_part_way
        if second % 2 == 0:
            whole.drain(state)
        for _ in range(sizes.randrange(1, 4)):            # a few parts a second, rarely a whole batch
            if not parts.drain_part(state, sizes.randrange(1, 9)):
                break
        else:
            left_part_way += parts._batch is not None
        if second % 7 == 6:                               # a read: the rest at once, then the oracle
            parts.drain(state)
            got, want = parts.live.by_queue(), _per_task_sums(state)
            for path in set(got) | set(want):
                assert got.get(path, (0.0, 0.0)) == pytest.approx(want.get(path, (0.0, 0.0))), (second, path)

    _run_churn(state, [whole, parts], random.Random(7), between)
    assert left_part_way >= 10                            # batches did span new steps
    whole.drain(state), parts.drain(state)
    assert parts._batch is None and set(parts.tasks) == set(whole.tasks) and len(whole.tasks) >= 20
    assert parts.live.by_queue().keys() == whole.live.by_queue().keys()
    for path, sums in whole.live.by_queue().items():
        assert parts.live.by_queue()[path] == pytest.approx(sums), path
    for task_id, rec in whole.tasks.items():
        mine = parts.tasks[task_id]
        assert (rec.node, rec.attempt) == (mine.node, mine.attempt), task_id
        a, b = rec.series.read(0, 1e9), mine.series.read(0, 1e9)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=True) for k in a), task_id


def test_a_part_is_at_least_one_heartbeat_and_none_takes_the_whole_batch() -> None:
    from tcluster.master.usage.recorder import _Batch
    block = UsageBlock.of({f"j.{i}": (1, _usage(1.0, 1.0, 10, 1)) for i in range(5)})
    batch = _Batch([(1.0, "n", block)] * 4, [], [])
    assert len(batch.next_part(1)) == 1 and len(batch.next_part(6)) == 2 and batch.cursor == 3
    assert len(batch.next_part(None)) == 1 and batch.next_part(3) == [] and batch.cursor == 4


def test_a_read_drains_what_came_before_it_in_parts_serving_the_loop_between_them() -> None:
    """A dashboard read (the API, /metrics) drains a batch part-way and what came since, in
    parts: the loop runs between them, and the read sees every sample reported before it."""
    import asyncio
    from types import SimpleNamespace

    from tcluster.master.web import app

    state = _churn_state()
    rec = Recorder(HistoryConfig(step_s=1.0))
    for second in range(3):
        wall = 100.0 + second
        for node in ("n0", "n1"):
            mine = [t for ts in state.tasks.values() for t in ts if t.node == node]
            block = UsageBlock.of({t.id: (t.attempt, _usage(wall, second, 2**20, 0)) for t in mine})
            state.usage.put(block)
            rec.on_step(AppliedStep(Beat(node, Resources(), block), Step(usage=block), Now(wall, wall)))
        if second == 1:
            assert rec.drain_part(state, 1)            # the loop left a batch part-way
    dashboard = SimpleNamespace(recorder=rec, service=SimpleNamespace(state=state))
    dashboard._drain_batch = lambda: app.Dashboard._drain_batch(dashboard)   # type: ignore[arg-type]
    ticks: list[int] = []

    async def other_work() -> None:
        while True:
            ticks.append(len(rec.tasks))
            await asyncio.sleep(0)

    async def read() -> None:
        other = asyncio.create_task(other_work())
        await app.Dashboard.drained(dashboard)          # type: ignore[arg-type]
        other.cancel()

    original = app.DRAIN_PART_SAMPLES
    app.DRAIN_PART_SAMPLES = 3
    try:
        asyncio.run(read())
    finally:
        app.DRAIN_PART_SAMPLES = original
    assert rec._batch is None and rec._beats == [] and len(rec.tasks) == 20
    assert len(ticks) >= 3                             # the loop ran between the five parts
    assert all(len(rec.tasks[t.id].series.read(0, 1e9)["t"]) >= 1 for ts in state.tasks.values() for t in ts)
