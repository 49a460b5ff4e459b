"""Shared pieces of the fuzz tests (tests/component/test_fuzz_*.py): Hypothesis strategies
for every message the master accepts, an in-process master on 127.0.0.1 port 0 run in a
background event loop (so Hypothesis drives it with plain blocking gRPC calls), the reply
checks, and an example counter printed at the end of the run."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Coroutine, TypeVar

import grpc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from google.protobuf import text_format
from google.protobuf.message import Message

from tests.component.harness import Harness, MasterStubs
from tcluster.master.settings import MasterSettings
from tcluster.v1 import common_pb2, jobs_pb2

T = TypeVar("T")
ALLOWED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAVAILABLE}
MAX_DETAILS = 1000
RPC_TIMEOUT_S = 10.0
# derandomize: the same examples on every run, so a run passes or fails the same way.
# TCL_FUZZ_SCALE=10 runs ten times as many examples; TCL_FUZZ_RANDOM=1 new ones each run
# (for hunting by hand; CI keeps the defaults).
SCALE = float(os.environ.get("TCL_FUZZ_SCALE", "1"))
FUZZ = settings(max_examples=int(120 * SCALE), deadline=None, database=None,
                derandomize=os.environ.get("TCL_FUZZ_RANDOM") != "1", print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture, HealthCheck.large_base_example])

# ---- counting ----

EXAMPLES: Counter[str] = Counter()


class _Summary:
    """A plugin registered on first use: prints the example counts after the run."""

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if EXAMPLES:
            terminalreporter.write_sep("=", f"fuzz: {sum(EXAMPLES.values())} examples")
            for name, count in sorted(EXAMPLES.items()):
                terminalreporter.write_line(f"  {count:5d} {name}")


def register_summary(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("tcluster-fuzz-summary"):
        config.pluginmanager.register(_Summary(), "tcluster-fuzz-summary")


# ---- values ----

class Shown:
    """A generated message with a short repr: Hypothesis prints falsifying examples, and a
    200 kB string must not flood the report. Long strings show as their prefix and length."""

    def __init__(self, msg: Message) -> None:
        self.msg = msg

    def __repr__(self) -> str:
        text = text_format.MessageToString(self.msg, as_one_line=True)
        text = _LONG_STRING.sub(lambda m: f'{m.group(1)}…({len(m.group(0))} chars)"', text)
        return f"{type(self.msg).__name__}({text[:1500]})"


_LONG_STRING = re.compile(r'("(?:[^"\\]|\\.){40})(?:[^"\\]|\\.){20,}"')


def shown(strategy: st.SearchStrategy[Message]) -> st.SearchStrategy[Shown]:
    @st.composite
    def wrap(draw: st.DrawFn) -> Shown:   # not .map: Hypothesis would print the map's argument
        return Shown(draw(strategy))
    return wrap()


class ShortStr(str):
    """A huge generated string that shows as its first characters and its length."""

    def __repr__(self) -> str:
        return f"ShortStr({str.__repr__(self[:20])} * ~{len(self)})" if len(self) > 40 else str.__repr__(self)


huge_text = st.builds(lambda c, n: ShortStr(c * n), st.sampled_from(["a", "é", "\x00", "🙂", "/", " "]),
                      st.sampled_from([300, 10_000, 200_000]))
small_texts = st.one_of(st.text(max_size=30), st.sampled_from(["", "default", "a.b", "..", "\x00", "-", "*"]))
texts = st.one_of(small_texts, huge_text)
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.0, -0.0, -1.0, 1e-320, 1e308, float("nan"), float("inf"), -float("inf")]))
int32s = st.one_of(st.integers(-2**31, 2**31 - 1), st.sampled_from([0, 1, -1, 2**31 - 1, -2**31]))
int64s = st.one_of(st.integers(-2**63, 2**63 - 1), st.sampled_from([0, 1, -1, 2**63 - 1, -2**63, 2**40]))
uint64s = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2**64 - 1]))
small_maps = st.dictionaries(texts, texts, max_size=4)
huge_maps = st.builds(lambda n: {f"k{i}": "v" * 10 for i in range(n)}, st.sampled_from([100, 5000]))
str_maps = st.one_of(small_maps, huge_maps)


@st.composite
def resources(draw: st.DrawFn) -> common_pb2.Resources:
    msg = common_pb2.Resources(cpu=draw(floats), memory=draw(int64s))
    msg.other.update(draw(st.dictionaries(texts, floats, max_size=3)))
    return msg


@st.composite
def job_specs(draw: st.DrawFn, huge: bool = True) -> jobs_pb2.JobSpec:
    """Any JobSpec: sane-looking ones often (so some are accepted), garbage in every field;
    `huge=False` leaves out the 10-200 kB strings and maps (cheaper, for sequences)."""
    texts = globals()["texts"] if huge else small_texts
    str_maps = globals()["str_maps"] if huge else small_maps
    spec = jobs_pb2.JobSpec(
        name=draw(st.one_of(st.just(""), st.just("fuzz"), texts)),
        queue=draw(st.one_of(st.just(""), st.just("default"), st.just("no.such.queue"), texts)),
        tasks=draw(st.one_of(st.integers(-3, 4), st.sampled_from([10**6, 2**31 - 1, -2**31]))),
        command=draw(st.one_of(st.just(["true"]), st.lists(texts, max_size=4),
                               st.builds(lambda n: ["x"] * n, st.sampled_from([5000, 100_000] if huge else [5000])))),
        user=draw(texts), workdir=draw(st.one_of(st.just(""), st.just("/tmp"), texts)),
        constraints=draw(st.lists(texts, max_size=3)), weight=draw(floats), retries=draw(int32s),
        image=draw(st.one_of(st.just(""), texts)), network=draw(st.one_of(st.just(""), st.just("host"), texts)),
        cpu_limit=draw(floats), swap=draw(int64s), pids_max=draw(int64s), log_max_bytes=draw(int64s),
        net_limit=draw(floats),
    )
    spec.env.update(draw(str_maps))
    spec.labels.update(draw(str_maps))
    if draw(st.booleans()):
        spec.resources.CopyFrom(draw(resources()))
    else:
        spec.resources.cpu, spec.resources.memory = draw(st.sampled_from([0.1, 1.0])), 2**20
    return spec


def full_spec() -> jobs_pb2.JobSpec:
    """A valid spec that sets every field (the store must keep each one)."""
    spec = jobs_pb2.JobSpec(
        name="full", queue="default", tasks=2, command=["sh", "-c", "echo $X"], env={"X": "1"}, user="nobody",
        workdir="/tmp", labels={"team": "a"}, constraints=["rack=r1"], weight=2.5, retries=2, image="",
        network="none", cpu_limit=0.5, swap=-1, pids_max=100, log_max_bytes=2**20, net_limit=1e6)
    spec.resources.cpu, spec.resources.memory = 0.5, 2**24
    spec.resources.other["net"] = 1e6
    return spec


def normal_spec() -> jobs_pb2.JobSpec:
    spec = jobs_pb2.JobSpec(command=["true"], tasks=1)
    spec.resources.cpu, spec.resources.memory = 0.1, 2**20
    return spec


# ---- the master ----

class ErrorLog(logging.Handler):
    """Collects ERROR records of the master and gRPC (an "internal error", a failed
    round, an exception a servicer let out): a crash the client may never see."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("tcluster.agent"):
            return   # the in-process agent of a test is not the master
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f": {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        self.records.append(text[:500])

    def take(self) -> list[str]:
        out, self.records = self.records, []
        return out


def _settings_overrides() -> dict[str, object]:
    """Timeouts long enough that nothing changes on its own during a run (fields the
    master does not have yet are left out)."""
    wanted = {"node_timeout_s": 3600.0, "lost_timeout_s": 3600.0, "start_timeout_s": 3600.0}
    return {k: v for k, v in wanted.items() if k in MasterSettings.model_fields}


class BackgroundMaster(MasterStubs):
    """The harness's in-process master, on its own event loop in a daemon thread."""

    def __init__(self, tmp: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzz-master", daemon=True)
        self.thread.start()
        self.harness = Harness(tmp)
        self.errors = ErrorLog()
        for name in ("tcluster", "grpc"):
            logging.getLogger(name).addHandler(self.errors)
        self.run(self.harness.start_master(**_settings_overrides()))
        self.channel = grpc.insecure_channel(self.harness.address)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def restart(self) -> None:
        self.run(self.harness.stop_master())
        self.run(self.harness.start_master(**_settings_overrides()))

    def close(self) -> None:
        try:
            self.run(self.harness.stop())
        finally:
            self.channel.close()
            for name in ("tcluster", "grpc"):
                logging.getLogger(name).removeHandler(self.errors)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


# ---- checks ----

def outcome(call: Callable[[], T]) -> tuple[grpc.StatusCode, str, T | None]:
    """Runs one RPC; returns (code, details, reply or None)."""
    try:
        return grpc.StatusCode.OK, "", call()
    except grpc.RpcError as error:
        return error.code(), error.details() or "", None  # type: ignore[attr-defined]


def reply_problem(code: grpc.StatusCode, details: str) -> str | None:
    """None for an acceptable reply, else what is wrong with it."""
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED and "metadata size exceeds" in details:
        # gRPC itself refused the status: the master's message was too long to carry
        # (between 8 and 16 kB gRPC drops it only sometimes, so this counts as "too long").
        return f"error message too long for gRPC to deliver ({details[:160]})"
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED and "Received message larger than max" in details:
        return None   # gRPC's own bound on a message (tcluster.wire.channels.MAX_MESSAGE_BYTES), before the master
    if len(details) >= MAX_DETAILS:
        return f"error message too long: {code.name}, {len(details)} chars: {details[:160]}"
    if code not in ALLOWED:
        return f"status {code.name}: {details[:300]}"
    return None


def check_reply(what: str, code: grpc.StatusCode, details: str) -> None:
    """Never INTERNAL/UNKNOWN (or anything but the allowed codes), never a long message."""
    problem = reply_problem(code, details)
    assert problem is None, f"{what}: {problem}"


def check_alive(master: BackgroundMaster, what: str) -> str:
    """A normal Submit + Get still work, the reads (List, ListNodes, ListQueues) still
    answer, and the master logged no error; returns the job id. The job is cancelled at
    once, so thousands of probes do not pile up as pending work."""
    job = master.jobs.Submit(jobs_pb2.SubmitRequest(spec=normal_spec()), timeout=RPC_TIMEOUT_S)
    got = master.jobs.Get(jobs_pb2.GetJobRequest(id=job.id), timeout=RPC_TIMEOUT_S)
    assert got.id == job.id
    for name, call in (("List", lambda: master.jobs.List(jobs_pb2.ListJobsRequest(limit=3), timeout=RPC_TIMEOUT_S)),
                       ("ListNodes", lambda: master.cluster.ListNodes(jobs_pb2.ListNodesRequest(), timeout=RPC_TIMEOUT_S)),
                       ("ListQueues", lambda: master.cluster.ListQueues(jobs_pb2.ListQueuesRequest(), timeout=RPC_TIMEOUT_S))):
        code, details, _ = outcome(call)
        assert code is grpc.StatusCode.OK, f"after {what}, {name} fails: {code.name}: {details[:300]}"
    code, details, _ = outcome(lambda: master.jobs.Cancel(jobs_pb2.CancelJobRequest(id=job.id), timeout=RPC_TIMEOUT_S))
    assert code in (grpc.StatusCode.OK, grpc.StatusCode.FAILED_PRECONDITION), f"cancel of a probe: {code.name}: {details}"
    errors = master.errors.take()
    assert errors == [], f"after {what} the master logged errors: {errors[:3]}"
    return job.id


def snapshot(master: BackgroundMaster) -> tuple[list[tuple[object, ...]], list[str]]:
    """Every job (id, state, spec, each task's state/attempt/node/exit) and every node name."""
    jobs = master.jobs.List(jobs_pb2.ListJobsRequest(all=True), timeout=60).jobs
    rows = [(j.id, j.state, _canonical(j.spec),
             tuple((t.id, t.state, t.attempt, t.node, t.has_exit_code, t.exit_code) for t in j.tasks))
            for j in jobs]
    nodes = master.cluster.ListNodes(jobs_pb2.ListNodesRequest(), timeout=60).nodes
    return sorted(rows), sorted(n.name for n in nodes)


def _canonical(spec: jobs_pb2.JobSpec) -> str:
    """The spec as text, with every -0.0 made 0.0 (a codec may drop the sign of a zero)."""
    copy = jobs_pb2.JobSpec()
    copy.CopyFrom(spec)
    for holder, name in ((copy, "weight"), (copy, "cpu_limit"), (copy, "net_limit"), (copy.resources, "cpu")):
        if getattr(holder, name) == 0:
            setattr(holder, name, 0.0)
    for key, value in list(copy.resources.other.items()):
        if value == 0:
            copy.resources.other[key] = 0.0
    return text_format.MessageToString(copy, as_one_line=True)


def _row_diff(before: tuple[object, ...], after: tuple[object, ...]) -> str:
    names = ("id", "state", "spec", "tasks")
    return "; ".join(f"{n}: {str(b)[:300]} -> {str(a)[:300]}" for n, b, a in zip(names, before, after) if a != b)


def check_restart_keeps_everything(master: BackgroundMaster) -> int:
    """Restarts the master on its data dir: the same jobs, task states and nodes come back."""
    before = snapshot(master)
    master.restart()
    after = snapshot(master)
    assert len(after[0]) == len(before[0]), f"{len(before[0])} jobs before the restart, {len(after[0])} after"
    changed = [(b, a) for b, a in zip(before[0], after[0]) if a != b]
    assert changed == [], (f"{len(changed)} of {len(before[0])} jobs differ after the restart, e.g. "
                           f"{_row_diff(*changed[0])}")
    assert after[1] == before[1]
    return len(before[0])
