"""Heartbeat usage as columns (issues 10, 11): whatever reads a task's usage sees exactly
what converting each sample with `usage_from_pb` gave, field for field and type for type
(absent optional fields included); the recorder's figures and rings are those of the
objects; /metrics text and the API's documents are unchanged."""

from __future__ import annotations

import random
from dataclasses import fields, replace
from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings, strategies as st

from tcluster.master.core.events import Beat, Now, Step
from tcluster.master.core.feed import AppliedStep
from tcluster.master.usage.history import HistoryConfig
from tcluster.master.usage.ingest import RAW_FIELDS, extract
from tcluster.master.usage.metrics import TaskSeriesRenderer
from tcluster.master.usage.recorder import Recorder
from tcluster.master.core.state import MasterState, Timeouts
from tcluster.master.core.transitions import handle
from tcluster.master.web.api import TaskDocs
from tcluster.domain.model import Job, JobSpec, Node, Task, TaskState, TaskUsage
from tcluster.domain.resources import Resources
from tcluster.master.core.usageblock import EMPTY, UsageBlock, UsageIndex
from tcluster.v1 import common_pb2
from tcluster.master.edge.agent_codec import usage_block_from_pb
from tcluster.wire.protobuf import usage_from_pb, usage_to_pb

GiB = 2**30
INT64 = st.integers(-2**63, 2**63 - 1)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
# Any value the wire can carry: int64 beyond 2**53 must stay exact, inactive unset or 0 or set
USAGES = st.builds(TaskUsage, **{f.name: (FINITE if f.type == "float" else INT64) for f in fields(TaskUsage)
                                 if f.name != "memory_inactive_file_bytes"},
                   memory_inactive_file_bytes=st.one_of(st.just(-1), st.just(0), st.integers(0, 2**62)))
SAMPLES = st.lists(st.tuples(st.sampled_from(["", "a.0", "a.1", "b.0", "b.12"]), st.integers(0, 2**31 - 1), USAGES),
                   max_size=12)


def _pbs(samples: list[tuple[str, int, TaskUsage]]) -> list[common_pb2.TaskUsage]:
    return [usage_to_pb(u, task_id, attempt) for task_id, attempt, u in samples]


def _old(pbs: list[common_pb2.TaskUsage]) -> dict[str, tuple[int, TaskUsage]]:
    """What agent_codec made of a heartbeat's samples before the columns."""
    return {u.task_id: (u.attempt, usage_from_pb(u)) for u in pbs if u.task_id}


def _same(a: TaskUsage, b: TaskUsage) -> bool:
    return all(type(getattr(a, f.name)) is type(getattr(b, f.name)) for f in fields(TaskUsage)) and a == b


@given(SAMPLES)
@settings(max_examples=300, deadline=None)
def test_a_lazy_sample_is_what_usage_from_pb_made_field_for_field(samples: list) -> None:
    pbs = _pbs(samples)
    block = usage_block_from_pb(pbs)
    old = _old(pbs)
    assert list(block.ids) == list(old)                      # same tasks, same order (a repeat: its last)
    for row, (task_id, attempt) in enumerate(zip(block.ids, block.attempts)):
        assert attempt == old[task_id][0]
        assert _same(block.usage(row), old[task_id][1])


@given(st.lists(st.tuples(st.integers(0, 2**31 - 1), USAGES), max_size=8))
@settings(max_examples=200, deadline=None)
def test_blocks_of_domain_values_read_back_the_values(items: list) -> None:
    samples = {f"j.{i}": item for i, item in enumerate(items)}
    block = UsageBlock.of(samples)
    assert [block.usage(r) for r in range(len(block))] == [u for _, u in samples.values()]
    assert all(_same(block.usage(r), u) for r, (_, u) in enumerate(samples.values()))


def test_an_absent_inactive_figure_reads_minus_one_and_a_sent_zero_reads_zero() -> None:
    unset = common_pb2.TaskUsage(task_id="a.0", attempt=1, memory_bytes=1000, memory_file_bytes=600)
    zero = common_pb2.TaskUsage(task_id="a.1", attempt=1, memory_bytes=1000, memory_inactive_file_bytes=0)
    block = usage_block_from_pb([unset, zero])
    assert [block.usage(r).memory_inactive_file_bytes for r in range(2)] == [-1, 0]
    assert [block.usage(r).working_set_bytes for r in range(2)] == [400, 1000]


def _raw_of_objects(usages: list[TaskUsage]) -> np.ndarray:
    """The recorder's figures as it read them off TaskUsage objects before the columns."""
    return np.array([[float(getattr(u, f)) for f in RAW_FIELDS] for u in usages], dtype=np.float64).reshape(
        len(usages), len(RAW_FIELDS))


@given(st.lists(SAMPLES, min_size=1, max_size=4))
@settings(max_examples=200, deadline=None)
def test_the_recorders_figures_are_those_of_the_objects(beats: list) -> None:
    blocks = [usage_block_from_pb(_pbs(samples)) for samples in beats]
    objects = [u for samples in beats for _, u in _old(_pbs(samples)).values()]
    assert np.array_equal(extract(blocks), _raw_of_objects(objects))


def _state(tasks: int) -> MasterState:
    spec = JobSpec(command=("x",), resources=Resources.of({"cpu": 0.5, "memory": GiB}), name="train", queue="a.b")
    job = Job(id="0000abcd", spec=spec, submitted_at=1.0)
    nodes = [Node(f"n{i}", Resources.of({"cpu": 64, "memory": 64 * GiB})) for i in range(2)]
    running = [Task("0000abcd", i, TaskState.RUNNING, node=f"n{i % 2}", attempt=1) for i in range(tasks)]
    state = MasterState([job], running, nodes, [], Timeouts(), 0.0)
    for node in state.nodes:
        state.reattach(node, 1.0, 1.0)
    return state


def _heartbeats(rng: random.Random, state: MasterState, t: float) -> dict[str, list[common_pb2.TaskUsage]]:
    """Each node's samples at `t`: counters that grow, an inactive figure sent or not, a stale attempt."""
    out: dict[str, list[common_pb2.TaskUsage]] = {}
    for node in sorted(state.nodes):
        pbs = []
        for task_id in sorted(state.by_node.get(node, ())):
            u = TaskUsage(cpu_seconds=t * rng.random(), cpu_rate=rng.random() * 4, cpu_system_rate=rng.random(),
                          cpu_throttled_seconds=t * rng.random(), memory_bytes=rng.randrange(2**34),
                          memory_file_bytes=rng.randrange(2**30), memory_anon_bytes=rng.randrange(2**33),
                          memory_swap_bytes=rng.randrange(2**20), pids=rng.randrange(100),
                          io_read_bytes=int(t) * rng.randrange(2**20), io_write_bytes=int(t) * rng.randrange(2**20),
                          oom_kills=rng.randrange(3), memory_peak_bytes=rng.randrange(2**35),
                          sampled_at=t if rng.random() < 0.8 else 0.0,
                          memory_inactive_file_bytes=rng.choice([-1, 0, rng.randrange(2**29)]))
            pbs.append(usage_to_pb(u, task_id, 1 if rng.random() < 0.95 else 7))
        out[node] = pbs
    return out


def _feed_objects(state: MasterState, rec: Recorder, node: str, pbs: list, now: Now) -> None:
    """The path before the columns: objects in the state, and the recorder fed by value."""
    state.apply(handle(state, Beat(node, Resources(), EMPTY), now))     # liveness and free alike
    kept = {k: v for k, v in _old(pbs).items() if (t := state.task(k)) and t.attempt == v[0]}
    for task_id, (_, u) in kept.items():
        state.usage[task_id] = u
    if kept:
        block = UsageBlock.of(kept)
        rec.on_step(AppliedStep(Beat(node, Resources(), block), Step(usage=block), now))


def test_rings_metrics_and_api_documents_match_the_object_path() -> None:
    rng = random.Random(11)
    new, old = _state(40), _state(40)
    rec_new, rec_old = Recorder(HistoryConfig(step_s=1.0)), Recorder(HistoryConfig(step_s=1.0))
    for second in range(12):
        wall = 1000.0 + second
        for node, pbs in _heartbeats(rng, new, wall).items():
            beat = Beat(node, Resources(), usage_block_from_pb(pbs))
            step = handle(new, beat, Now(wall, 2.0 + second))
            new.apply(step)
            rec_new.on_step(AppliedStep(beat, step, Now(wall, wall)))
            _feed_objects(old, rec_old, node, pbs, Now(wall, 2.0 + second))
        if second % 5 == 4:
            rec_new.drain(new), rec_old.drain(old)
    rec_new.drain(new), rec_old.drain(old)
    # Rows of slots never taken may be unwritten memory (taskrings: cleared when first taken).
    taken = rec_new.rings.owners > 0
    assert np.array_equal(taken, rec_old.rings.owners > 0) and taken.any()
    starts = rec_new.rings.starts
    for tier_new, tier_old in zip(rec_new.rings.tiers, rec_old.rings.tiers):
        assert all(np.array_equal(a[:, taken[start:start + a.shape[1]]], b[:, taken[start:start + b.shape[1]]])
                   for start, a, b in zip(starts, tier_new.blocks, tier_old.blocks))
        assert np.array_equal(tier_new.acc, tier_old.acc) and np.array_equal(tier_new.count, tier_old.count)
    assert np.array_equal(rec_new.counters.prev, rec_old.counters.prev)
    assert {k: r.ooms for k, r in rec_new.tasks.items()} == {k: r.ooms for k, r in rec_old.tasks.items()}
    assert rec_new.nodes["n0"].read(0, 2000) == rec_old.nodes["n0"].read(0, 2000)
    assert dict(new.usage) == dict(old.usage)
    assert TaskSeriesRenderer(rec_new).render(new) == TaskSeriesRenderer(rec_old).render(old)
    tasks_new, tasks_old = new.tasks["0000abcd"], old.tasks["0000abcd"]
    assert TaskDocs().docs(new, tasks_new) == TaskDocs().docs(old, tasks_old)
    assert [new.task_view(t) for t in tasks_new] == [old.task_view(t) for t in tasks_old]
    rec_new.sample_cluster(2000.0, new, []), rec_old.sample_cluster(2000.0, old, [])
    assert rec_new.cluster.read(0, 3000) == rec_old.cluster.read(0, 3000)


def test_a_beat_keeps_only_samples_of_its_own_running_attempts() -> None:
    state = _state(4)
    pbs = [usage_to_pb(TaskUsage(cpu_rate=float(i)), f"0000abcd.{i}", 1 if i != 2 else 5) for i in range(4)]
    pbs.append(usage_to_pb(TaskUsage(), "ffff0000.0", 1))        # a task the master does not know
    step = handle(state, Beat("n0", Resources(), usage_block_from_pb(pbs)), Now(10.0, 3.0))
    assert step.usage is not None and list(step.usage.ids) == ["0000abcd.0"]   # n1's tasks, attempt 5: not kept
    state.apply(step)
    assert state.usage["0000abcd.0"].cpu_rate == 0.0 and "0000abcd.2" not in state.usage
    every = handle(state, Beat("n1", Resources(), usage_block_from_pb([pbs[1], pbs[3]])), Now(11.0, 4.0))
    assert every.usage is not None and every.usage.ids == ("0000abcd.1", "0000abcd.3")
    assert handle(state, Beat("n1", Resources(), EMPTY), Now(12.0, 5.0)).usage is None


def test_the_index_reads_a_sample_as_one_object_until_the_next() -> None:
    index = UsageIndex()
    block = UsageBlock.of({"a.0": (1, TaskUsage(cpu_rate=1.0)), "a.1": (1, TaskUsage(cpu_rate=2.0))})
    index.put(block)
    first = index["a.0"]
    assert index["a.0"] is first and index.get("a.1") == TaskUsage(cpu_rate=2.0) and len(index) == 2
    assert index.where("a.1") == (block, 1)
    index.put(UsageBlock.of({"a.0": (1, TaskUsage(cpu_rate=3.0))}))
    assert index["a.0"] is not first and index["a.0"].cpu_rate == 3.0
    mine = TaskUsage(memory_bytes=5)
    index["b.0"] = mine
    assert index["b.0"] is mine
    index.discard("a.0"), index.discard("nothing")
    del index["b.0"]
    assert list(index) == ["a.1"] and "a.0" not in index and index.get("a.0") is None
    assert replace(block.take([1]).usage(0)) == TaskUsage(cpu_rate=2.0)


def test_the_service_path_decodes_heartbeats_into_columns() -> None:
    from tcluster.master.edge.agent_codec import inbound_from_pb
    from tcluster.v1 import agent_pb2
    pbs = [usage_to_pb(TaskUsage(pids=i), f"j.{i}", 1) for i in range(3)] + [common_pb2.TaskUsage(pids=9)]
    msg = agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat(usage=pbs))
    beat = inbound_from_pb(msg)
    assert isinstance(beat.usage, UsageBlock) and beat.usage.ids == ("j.0", "j.1", "j.2")
    assert [beat.usage.usage(r).pids for r in range(3)] == [0, 1, 2]
    assert SimpleNamespace(**vars(beat.usage.usage(2))) == SimpleNamespace(**vars(usage_from_pb(pbs[2])))


@given(FINITE, INT64, st.dictionaries(st.sampled_from(["net", "gpu"]), FINITE, max_size=2))
def test_free_resources_decode_as_resources_of_did(cpu: float, memory: int, other: dict) -> None:
    from tcluster.wire.protobuf import resources_from_pb
    msg = common_pb2.Resources(cpu=cpu, memory=memory, other=other)
    decoded, reference = resources_from_pb(msg), Resources.of({"cpu": msg.cpu, "memory": msg.memory, **dict(msg.other)})
    assert decoded == reference and type(decoded.cpu) is float and type(decoded.memory) is int
