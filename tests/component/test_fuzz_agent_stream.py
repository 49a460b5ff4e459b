"""Fuzz of every agent-stream message kind on raw Connect streams to an in-process master.

Each example opens a stream as a (possibly bogus) agent and sends generated messages:
Register with inf/NaN/negative capacity, huge labels, names with NUL or 10 kB; heartbeats
with bogus usage for other nodes' tasks; task events for unknown tasks, wrong attempts,
bad states; log data nobody asked for; Register twice; empty messages. It proves: the
stream ends OK or with INVALID_ARGUMENT / NOT_FOUND / FAILED_PRECONDITION / UNAVAILABLE,
error messages stay short, the master still serves a normal Submit + Get with no error
logged, and the tasks a real agent runs are never changed by what other nodes say. The
last test restarts the master and finds every job and node as they were."""

from __future__ import annotations

import time
from typing import Callable, Iterator, TypeVar

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.component.fuzz_strategies import (
    EXAMPLES, FUZZ, RPC_TIMEOUT_S, SCALE, BackgroundMaster, Shown, check_alive, check_restart_keeps_everything,
    floats, int32s, int64s, register_summary, reply_problem, resources, shown, small_texts, str_maps, texts,
    uint64s,
)
from tcluster.v1 import agent_pb2, agent_pb2_grpc, common_pb2, jobs_pb2

T = TypeVar("T")
STREAM_TIMEOUT_S = 5.0
AGENT_FUZZ = FUZZ.__class__(FUZZ, max_examples=int(80 * SCALE))
NODES = [f"fz-{i}" for i in range(6)]
REAL_NODE = "real-agent"
REAL: dict[str, list[str]] = {"job": [], "tasks": []}     # the real agent's running job and task ids


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[BackgroundMaster]:
    """A master, one real (fake-runtime) agent running a 3-task `sleep` job on REAL_NODE."""
    register_summary(request.config)
    running = BackgroundMaster(tmp_path_factory.mktemp("fuzz-agent"))
    try:
        running.run(running.harness.add_agent(REAL_NODE, cpus=4))
        spec = jobs_pb2.JobSpec(command=["sleep"], tasks=3)
        spec.resources.cpu, spec.resources.memory = 1, 2**20
        job = running.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec), timeout=RPC_TIMEOUT_S)
        REAL["job"], REAL["tasks"] = [job.id], [t.id for t in job.tasks]
        _wait_real_running(running)
        _submit_bait(running)
        yield running
    finally:
        running.close()


def _submit_bait(master: BackgroundMaster) -> None:
    """200 tasks of 3 cpus: they fit the real node's size but not its 1 free cpu, so they
    wait, and every fuzzed node that registers (inf capacity, odd free resources from its
    heartbeats) goes through placement."""
    spec = jobs_pb2.JobSpec(command=["sleep"], tasks=200)
    spec.resources.cpu, spec.resources.memory = 3, 2**20
    master.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec), timeout=RPC_TIMEOUT_S)


def _real_job(master: BackgroundMaster) -> jobs_pb2.Job:
    return master.jobs.Get(jobs_pb2.GetJobRequest(id=REAL["job"][0]), timeout=RPC_TIMEOUT_S)


def _real_intact(master: BackgroundMaster) -> bool:
    return all(t.state == common_pb2.TASK_RUNNING and t.node == REAL_NODE and t.attempt == 1
               for t in _real_job(master).tasks)


def _wait_real_running(master: BackgroundMaster) -> None:
    deadline = time.monotonic() + 10
    while not _real_intact(master):
        assert time.monotonic() < deadline, f"the real agent's job never ran: {_real_job(master)}"
        time.sleep(0.05)


# ---- strategies ----

def task_ids(huge: bool = True) -> st.SearchStrategy[str]:
    """Tasks of the real agent (other nodes must not touch them), odd ids, unknown ones."""
    real = st.builds(lambda i: REAL["tasks"][i % len(REAL["tasks"])], st.integers(0, 99))
    return st.one_of(real, real, st.sampled_from(["", ".", "nojob.0", "x.-1", "a.b.c"]), texts if huge else small_texts)


@st.composite
def usages(draw: st.DrawFn, huge: bool = True) -> common_pb2.TaskUsage:
    return common_pb2.TaskUsage(
        task_id=draw(task_ids(huge)), attempt=draw(int32s), cpu_seconds=draw(floats), cpu_rate=draw(floats),
        memory_bytes=draw(int64s), memory_peak_bytes=draw(int64s), pids=draw(int64s), sampled_at=draw(floats),
        oom_kills=draw(int64s), io_write_bytes=draw(int64s))


@st.composite
def task_events(draw: st.DrawFn, huge: bool = True) -> agent_pb2.TaskEvent:
    event = agent_pb2.TaskEvent(
        seq=draw(uint64s), task_id=draw(task_ids(huge)), attempt=draw(st.one_of(st.integers(-1, 3), int32s)),
        state=draw(st.one_of(st.integers(0, 8), int32s)), has_exit_code=draw(st.booleans()),
        exit_code=draw(int32s), signal=draw(int32s), reason=draw(texts if huge else small_texts), at=draw(floats),
        rejected=draw(st.booleans()))
    if draw(st.booleans()):
        event.usage.CopyFrom(draw(usages(huge)))
    return event


def many(make: Callable[[bool], st.SearchStrategy[T]], counts: list[int]) -> st.SearchStrategy[list[T]]:
    """Short lists; rarely one small element repeated past the master's per-message bounds
    (the whole message stays under gRPC's 4 MiB; such messages cost the master ~0.3 s)."""
    short = st.lists(make(True), max_size=3)
    over = st.builds(lambda x, n: [x] * n, make(False), st.sampled_from(counts))
    return st.integers(0, 15).flatmap(lambda pick: over if pick == 0 else short)


@st.composite
def registers(draw: st.DrawFn, sane: bool = False) -> agent_pb2.Register:
    """sane: a pooled name and real capacity (gets past registration); else anything."""
    reg = agent_pb2.Register(
        node=draw(st.sampled_from(NODES)) if sane else draw(st.one_of(
            st.sampled_from(NODES), st.sampled_from(["", "a\x00b", "x" * 10_000, REAL_NODE]), texts)),
        runtime=draw(small_texts), agent_version=draw(small_texts))
    if sane:
        reg.capacity.cpu, reg.capacity.memory = draw(st.sampled_from([1.0, 8.0])), 2**33
    else:
        reg.capacity.CopyFrom(draw(resources()))
        reg.reserved.CopyFrom(draw(resources()))
        reg.labels.update(draw(str_maps))
        reg.running.extend(agent_pb2.RunningTask(task_id=draw(task_ids()), attempt=draw(int32s))
                           for _ in range(draw(st.integers(0, 3))))
        reg.pending_events.extend(draw(many(task_events, [600])))
    return reg


@st.composite
def agent_messages(draw: st.DrawFn, kind: str | None = None) -> agent_pb2.AgentMessage:
    """One message of `kind` (register, heartbeat, events, log_data, empty), or of any kind."""
    kind = kind or draw(st.sampled_from(["register", "heartbeat", "events", "log_data", "empty"]))
    if kind == "register":
        return agent_pb2.AgentMessage(register=draw(registers()))
    if kind == "heartbeat":
        beat = agent_pb2.Heartbeat(free=draw(resources()), sent_at=draw(floats))
        beat.usage.extend(draw(many(usages, [20_001])))
        return agent_pb2.AgentMessage(heartbeat=beat)
    if kind == "events":
        return agent_pb2.AgentMessage(events=agent_pb2.TaskEvents(events=draw(many(task_events, [501]))))
    if kind == "log_data":
        return agent_pb2.AgentMessage(log_data=agent_pb2.LogData(
            request_id=draw(texts), data=draw(st.one_of(st.binary(max_size=64), st.just(b"\0" * 2**20))),
            eof=draw(st.booleans()), error=draw(texts)))
    return agent_pb2.AgentMessage()


def sane_register() -> st.SearchStrategy[agent_pb2.AgentMessage]:
    return st.builds(lambda reg: agent_pb2.AgentMessage(register=reg), registers(sane=True))


@st.composite
def streams(draw: st.DrawFn, kind: str | None = None) -> list[agent_pb2.AgentMessage]:
    """Mostly a sane Register first (so the fuzzed kind reaches the master), then 1-3 messages."""
    first = draw(st.one_of(sane_register(), sane_register(), sane_register(), agent_messages()))
    return [first, *draw(st.lists(agent_messages(kind), min_size=1, max_size=3))]


# ---- running one stream ----

def _connect(master: BackgroundMaster, messages: list[agent_pb2.AgentMessage]) -> tuple[grpc.StatusCode, str]:
    """Sends the messages, half-closes, reads until the master ends the stream. Our own
    deadline (the master kept a half-closed stream open) is not a reply: it counts as OK."""
    stub = agent_pb2_grpc.AgentServiceStub(master.channel)
    try:
        for _ in stub.Connect(iter(messages), timeout=STREAM_TIMEOUT_S):
            pass
    except grpc.RpcError as error:
        code, details = error.code(), error.details() or ""  # type: ignore[attr-defined]
        if code is grpc.StatusCode.DEADLINE_EXCEEDED and "Deadline Exceeded" in details:
            return grpc.StatusCode.OK, ""
        return code, details
    return grpc.StatusCode.OK, ""


def _exercise(master: BackgroundMaster, name: str, messages: list[Shown]) -> None:
    EXAMPLES[f"Connect/{name}"] += 1
    code, details = _connect(master, [m.msg for m in messages])
    problem = reply_problem(code, details)
    assert problem is None, f"Connect/{name}: {problem}"
    check_alive(master, f"Connect/{name}")
    real = _real_job(master)
    assert _real_intact(master), f"other nodes' messages changed the real agent's tasks: {real.tasks}"


@st.composite
def _shown_stream(draw: st.DrawFn, kind: str | None) -> list[Shown]:
    return [Shown(m) for m in draw(streams(kind))]


@AGENT_FUZZ
@given(messages=_shown_stream("register"))
def test_register(master: BackgroundMaster, messages: list[Shown]) -> None:
    """Bogus Registers first or second (Register twice)."""
    _exercise(master, "register", messages)


@AGENT_FUZZ
@given(messages=_shown_stream("heartbeat"))
def test_heartbeat(master: BackgroundMaster, messages: list[Shown]) -> None:
    _exercise(master, "heartbeat", messages)


@AGENT_FUZZ
@given(messages=_shown_stream("events"))
def test_task_events(master: BackgroundMaster, messages: list[Shown]) -> None:
    _exercise(master, "events", messages)


@AGENT_FUZZ
@given(messages=_shown_stream("log_data"))
def test_log_data(master: BackgroundMaster, messages: list[Shown]) -> None:
    _exercise(master, "log_data", messages)


@AGENT_FUZZ
@given(messages=_shown_stream(None))
def test_mixed_streams(master: BackgroundMaster, messages: list[Shown]) -> None:
    """Any kinds in any order, empty messages and a first message that is not Register."""
    _exercise(master, "mixed", messages)


@AGENT_FUZZ
@given(message=shown(agent_messages()))
def test_first_message_alone(master: BackgroundMaster, message: Shown) -> None:
    """A stream of one message of any kind: a non-Register first is refused, nothing else."""
    _exercise(master, "alone", [message])


def test_zz_restart_finds_everything_as_it_was(master: BackgroundMaster) -> None:
    """Runs last in this file: every job, task state and node survives a restart."""
    assert check_restart_keeps_everything(master) >= 1
    assert master.errors.take() == []
