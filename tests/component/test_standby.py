"""master/store/standby.py on a real in-process grpc.aio server: a standby refuses every call but
the join, with the leader's address in the trailing metadata; a leader passes calls through."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable

import grpc
import pytest

from tcluster.master.store.standby import (
    LEADER_METADATA, AlwaysLeader, LeaderInfo, PortKind, StandbyInterceptor, standby_answer,
)
from tcluster.v1 import agent_pb2, agent_pb2_grpc, jobs_pb2, jobs_pb2_grpc, join_pb2, join_pb2_grpc

LEADER = LeaderInfo(id="m2", client="10.0.0.2:7070", agent="10.0.0.2:7071", http="10.0.0.2:7080")


@dataclass
class FlipView:
    """A LeaderView the test flips."""

    is_leading: bool = False
    info: LeaderInfo | None = None
    why: str = "election in progress"

    def leading(self) -> bool:
        return self.is_leading

    def leader(self) -> LeaderInfo | None:
        return self.info

    def why_no_leader(self) -> str:
        return self.why


class Jobs(jobs_pb2_grpc.JobServiceServicer):
    async def Get(self, request: jobs_pb2.GetJobRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.Job:
        return jobs_pb2.Job(id=request.id)

    async def Logs(self, request: jobs_pb2.LogsRequest, context: grpc.aio.ServicerContext
                   ) -> AsyncIterator[jobs_pb2.LogChunk]:
        for part in (b"one", b"two"):
            yield jobs_pb2.LogChunk(data=part)


class Agents(agent_pb2_grpc.AgentServiceServicer):
    async def Connect(self, requests: AsyncIterator[agent_pb2.AgentMessage], context: grpc.aio.ServicerContext
                      ) -> AsyncIterator[agent_pb2.MasterMessage]:
        async for _ in requests:
            yield agent_pb2.MasterMessage(registered=agent_pb2.Registered(heartbeat_interval_s=3))
            return


class Join(join_pb2_grpc.NodeJoinServicer):
    async def Join(self, request: join_pb2.JoinRequest, context: grpc.aio.ServicerContext) -> join_pb2.JoinResponse:
        return join_pb2.JoinResponse(node=request.node)


Scenario = Callable[[grpc.aio.Channel, FlipView], Awaitable[None]]


def serve(scenario: Scenario, port_kind: PortKind = "client") -> None:
    async def main() -> None:
        view = FlipView()
        server = grpc.aio.server(interceptors=[StandbyInterceptor(view, port_kind)])
        jobs_pb2_grpc.add_JobServiceServicer_to_server(Jobs(), server)
        agent_pb2_grpc.add_AgentServiceServicer_to_server(Agents(), server)
        join_pb2_grpc.add_NodeJoinServicer_to_server(Join(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await scenario(channel, view)
        finally:
            await server.stop(0)
    asyncio.run(main())


def leader_hint(error: grpc.aio.AioRpcError) -> str | None:
    return dict(error.trailing_metadata() or ()).get(LEADER_METADATA)


async def get(channel: grpc.aio.Channel) -> jobs_pb2.Job:
    return await jobs_pb2_grpc.JobServiceStub(channel).Get(jobs_pb2.GetJobRequest(id="j1"), timeout=5)


async def logs(channel: grpc.aio.Channel) -> list[bytes]:
    return [c.data async for c in jobs_pb2_grpc.JobServiceStub(channel).Logs(jobs_pb2.LogsRequest(), timeout=5)]


async def connect(channel: grpc.aio.Channel) -> agent_pb2.MasterMessage:
    call = agent_pb2_grpc.AgentServiceStub(channel).Connect(timeout=5)
    await call.write(agent_pb2.AgentMessage())
    message = await call.read()
    if message is grpc.aio.EOF:
        await call    # raises the status the server ended with
    return message


@pytest.mark.parametrize("call", [get, logs, connect], ids=["unary", "server-streaming", "bidi"])
def test_standby_names_the_leader_on_every_kind_of_call(call: Callable[[grpc.aio.Channel], Awaitable[object]]) -> None:
    async def scenario(channel: grpc.aio.Channel, view: FlipView) -> None:
        view.info = LEADER
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call(channel)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert info.value.details() == "this master is a standby; the leader is at 10.0.0.2:7070"
        assert leader_hint(info.value) == "10.0.0.2:7070"
        view.is_leading = True     # the same server, now leading: the call goes through
        assert await call(channel)
    serve(scenario)


def test_agent_port_names_the_leaders_agent_address() -> None:
    async def scenario(channel: grpc.aio.Channel, view: FlipView) -> None:
        view.info = LEADER
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await connect(channel)
        assert info.value.details() == "this master is a standby; the leader is at 10.0.0.2:7071"
        assert leader_hint(info.value) == "10.0.0.2:7071"
    serve(scenario, port_kind="agent")


def test_no_leader_says_why_with_an_empty_hint() -> None:
    async def scenario(channel: grpc.aio.Channel, view: FlipView) -> None:
        view.why = "election in progress, or the store is unreachable: etcd down"
        for call in (get, logs, connect):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call(channel)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            assert info.value.details() == ("this master is a standby; no master leads yet (election in progress, "
                                            "or the store is unreachable: etcd down)")
            assert leader_hint(info.value) == ""
    serve(scenario)


def test_join_is_served_by_a_standby() -> None:
    async def scenario(channel: grpc.aio.Channel, view: FlipView) -> None:
        reply = await join_pb2_grpc.NodeJoinStub(channel).Join(join_pb2.JoinRequest(node="n1"), timeout=5)
        assert reply.node == "n1"
    serve(scenario)


def test_unknown_methods_stay_unimplemented() -> None:
    async def scenario(channel: grpc.aio.Channel, view: FlipView) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await jobs_pb2_grpc.ClusterServiceStub(channel).WhoAmI(jobs_pb2.WhoAmIRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    serve(scenario)


def test_always_leader_and_the_answer_without_a_view() -> None:
    assert AlwaysLeader().leading() and AlwaysLeader().leader() is None
    assert standby_answer(FlipView(info=LEADER), "agent") == (
        "this master is a standby; the leader is at 10.0.0.2:7071", "10.0.0.2:7071")
    with pytest.raises(ValueError):
        StandbyInterceptor(FlipView(), "http")  # type: ignore[arg-type]


class _Requests:
    """A streaming call's requests: `first` after `delay_s` (None: never), then the end."""

    def __init__(self, delay_s: float | None) -> None:
        self.delay_s, self.read = delay_s, 0

    def __aiter__(self) -> "_Requests":
        return self

    async def __anext__(self) -> agent_pb2.AgentMessage:
        if self.read:
            raise StopAsyncIteration
        if self.delay_s is None:
            await asyncio.Event().wait()
        await asyncio.sleep(self.delay_s or 0.0)
        self.read += 1
        return agent_pb2.AgentMessage()


class _Context:
    def __init__(self, requests: _Requests) -> None:
        self.requests, self.read_before_abort = requests, -1

    async def abort(self, code: grpc.StatusCode, details: str, trailing_metadata: tuple = ()) -> None:
        self.read_before_abort = self.requests.read
        raise grpc.RpcError(details)


@pytest.mark.parametrize("delay_s, read", [(0.0, 1), (0.05, 1), (None, 0)])
def test_a_streaming_call_is_refused_after_its_first_message_or_the_wait(
        delay_s: float | None, read: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal reads an agent's first message before it answers: a write still in flight
    when the call ends fails on the client, which then reports INTERNAL without the hint (a CI
    flake of the bidi case above). A client that writes nothing is answered after the wait."""
    from tcluster.master.store import standby
    monkeypatch.setattr(standby, "FIRST_MESSAGE_WAIT_S", 0.2)
    real = grpc.stream_stream_rpc_method_handler(Agents().Connect)
    refusing = standby._refusing_handler(real, "this master is a standby", "10.0.0.2:7071")
    requests = _Requests(delay_s)
    context = _Context(requests)

    async def call() -> None:
        with pytest.raises(grpc.RpcError):
            await refusing.stream_stream(requests, context)
    asyncio.run(call())
    assert context.read_before_abort == read
