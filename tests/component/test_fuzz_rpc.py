"""Fuzz of every JobService and ClusterService RPC against an in-process master.

Each example sends one generated request (or a short sequence of them) and proves: the
reply is OK or INVALID_ARGUMENT / NOT_FOUND / FAILED_PRECONDITION / UNAVAILABLE (never
INTERNAL or UNKNOWN), error messages stay short, and the master still serves a normal
Submit + Get with no error logged. The last test restarts the master on its data dir and
finds every job and node as they were: nothing was half-written."""

from __future__ import annotations

from typing import Callable, Iterator

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.component.fuzz_strategies import (
    EXAMPLES, FUZZ, RPC_TIMEOUT_S, SCALE, BackgroundMaster, Shown, check_alive, check_reply, check_restart_keeps_everything,
    floats, full_spec, int32s, int64s, job_specs, outcome, register_summary, shown, small_texts, texts,
)
from tcluster.v1 import jobs_pb2

KNOWN: list[str] = []          # ids of jobs that exist (filled as the fuzz runs)


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[BackgroundMaster]:
    register_summary(request.config)
    running = BackgroundMaster(tmp_path_factory.mktemp("fuzz-rpc"))
    KNOWN.clear()
    KNOWN.append(check_alive(running, "start"))
    KNOWN.append(running.jobs.Submit(jobs_pb2.SubmitRequest(spec=full_spec()), timeout=RPC_TIMEOUT_S).id)
    try:
        yield running
    finally:
        running.close()


def job_ids(huge: bool = True) -> st.SearchStrategy[str]:
    """Odd ids, and sometimes one that exists."""
    return st.one_of(texts if huge else small_texts, st.sampled_from(["", ".", "00000000", "../../etc/passwd"]),
                     st.builds(lambda i: KNOWN[i % len(KNOWN)], st.integers(0, 10**6)))


def _exercise(master: BackgroundMaster, name: str, call: Callable[[], object]) -> None:
    EXAMPLES[name] += 1
    code, details, reply = outcome(call)
    check_reply(name, code, details)
    if name == "Submit" and isinstance(reply, jobs_pb2.Job):
        KNOWN.append(reply.id)
    KNOWN.append(check_alive(master, name))


def _logs(master: BackgroundMaster, request: jobs_pb2.LogsRequest) -> bytes:
    """A followed log may legitimately stay open: then our own short deadline ends it."""
    try:
        return b"".join(chunk.data for chunk in master.jobs.Logs(request, timeout=2 if request.follow else RPC_TIMEOUT_S))
    except grpc.RpcError as error:
        if request.follow and error.code() is grpc.StatusCode.DEADLINE_EXCEEDED:  # type: ignore[attr-defined]
            return b""
        raise


@FUZZ
@given(spec=shown(job_specs()))
def test_submit(master: BackgroundMaster, spec: Shown) -> None:
    request = jobs_pb2.SubmitRequest(spec=spec.msg)
    _exercise(master, "Submit", lambda: master.jobs.Submit(request, timeout=RPC_TIMEOUT_S))


@FUZZ
@given(job_id=job_ids())
def test_get(master: BackgroundMaster, job_id: str) -> None:
    _exercise(master, "Get", lambda: master.jobs.Get(jobs_pb2.GetJobRequest(id=job_id), timeout=RPC_TIMEOUT_S))


@FUZZ
@given(job_id=job_ids())
def test_cancel(master: BackgroundMaster, job_id: str) -> None:
    _exercise(master, "Cancel", lambda: master.jobs.Cancel(jobs_pb2.CancelJobRequest(id=job_id), timeout=RPC_TIMEOUT_S))


@FUZZ
@given(states=st.lists(st.one_of(st.integers(0, 6), int32s), max_size=4), queue=texts, limit=int32s,
       all_=st.booleans(), page_token=st.one_of(st.just(""), texts))
def test_list(master: BackgroundMaster, states: list[int], queue: str, limit: int, all_: bool, page_token: str) -> None:
    request = jobs_pb2.ListJobsRequest(states=states, queue=queue, limit=limit, all=all_, page_token=page_token)
    _exercise(master, "List", lambda: master.jobs.List(request, timeout=RPC_TIMEOUT_S))


@FUZZ
@given(job_id=job_ids(), index=int32s, stream=st.one_of(st.integers(0, 2), int32s), tail=int64s, follow=st.booleans())
def test_logs(master: BackgroundMaster, job_id: str, index: int, stream: int, tail: int, follow: bool) -> None:
    request = jobs_pb2.LogsRequest(job_id=job_id, task_index=index, stream=stream, tail_bytes=tail, follow=follow)
    _exercise(master, "Logs", lambda: _logs(master, request))


@FUZZ
@given(calls=st.lists(st.sampled_from(["ListNodes", "ListQueues"]), min_size=1, max_size=3))
def test_cluster_service(master: BackgroundMaster, calls: list[str]) -> None:
    for name in calls:
        rpc = getattr(master.cluster, name)
        request = jobs_pb2.ListNodesRequest() if name == "ListNodes" else jobs_pb2.ListQueuesRequest()
        _exercise(master, name, lambda: rpc(request, timeout=RPC_TIMEOUT_S))


THE_NODE = "<the master's node>"      # replaced by a real node's name when the example runs


@FUZZ
@given(op=st.one_of(st.sampled_from(["cordon", "uncordon", "drain", "maint"]), small_texts),
       nodes=st.lists(st.one_of(texts, st.just(THE_NODE)), max_size=4), reason=texts, deadline=floats,
       start=floats, duration=floats)
def test_operate_nodes(master: BackgroundMaster, op: str, nodes: list[str], reason: str, deadline: float,
                       start: float, duration: float) -> None:
    """Node operations; the master's node is put back to READY after each example."""
    names = [n.name for n in master.cluster.ListNodes(jobs_pb2.ListNodesRequest(), timeout=RPC_TIMEOUT_S).nodes]
    nodes = [names[0] if n == THE_NODE and names else n for n in nodes]
    request = jobs_pb2.OperateNodesRequest(op=op, nodes=nodes, reason=reason, deadline_s=deadline, start=start,
                                           duration_s=duration)
    _exercise(master, "OperateNodes", lambda: master.cluster.OperateNodes(request, timeout=RPC_TIMEOUT_S))
    if names:
        master.cluster.OperateNodes(jobs_pb2.OperateNodesRequest(op="uncordon", nodes=names), timeout=RPC_TIMEOUT_S)


@FUZZ.__class__(FUZZ, max_examples=int(60 * SCALE))
@given(ops=st.lists(st.tuples(st.sampled_from(["submit", "get", "cancel", "list"]), shown(job_specs(huge=False)),
                              st.one_of(st.just(""), job_ids(huge=False))),
                    min_size=2, max_size=5))
def test_interleaved_calls(master: BackgroundMaster, ops: list[tuple[str, Shown, str]]) -> None:
    """Sequences: a job submitted, cancelled twice, listed, fetched, in any order."""
    for op, shown_spec, job_id in ops:
        spec = shown_spec.msg
        target = KNOWN[-1] if job_id == "" else job_id
        call = {"submit": lambda: master.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec), timeout=RPC_TIMEOUT_S),
                "get": lambda: master.jobs.Get(jobs_pb2.GetJobRequest(id=target), timeout=RPC_TIMEOUT_S),
                "cancel": lambda: master.jobs.Cancel(jobs_pb2.CancelJobRequest(id=target), timeout=RPC_TIMEOUT_S),
                "list": lambda: master.jobs.List(jobs_pb2.ListJobsRequest(all=True), timeout=RPC_TIMEOUT_S)}[op]
        _exercise(master, "Submit" if op == "submit" else op.capitalize(), call)


def test_zz_restart_finds_everything_as_it_was(master: BackgroundMaster) -> None:
    """Runs last in this file: every accepted job, task state and node survives a restart."""
    assert check_restart_keeps_everything(master) >= 1
    assert master.errors.take() == []
    with pytest.raises(grpc.RpcError):   # and it still refuses what it refused
        master.jobs.Submit(jobs_pb2.SubmitRequest(spec=jobs_pb2.JobSpec()), timeout=RPC_TIMEOUT_S)
