"""What a master that does not lead answers (docs/ha.md, "What a standby answers").

A gRPC server interceptor asks a LeaderView on every call. While this master leads, the
call goes through untouched. Otherwise every call but the join service ends at once with
UNAVAILABLE, a sentence naming the leader, and the trailing metadata `tcl-leader: ADDR`
that `tcl` and `tcl-agent` follow: the leader's client address on the client port, its
agent address on the agent port, "" when no master leads.

The refusal uses the same kind of handler (unary or streaming, either side) and the same
deserializer as the real method, so grpc reads the call as it would have for the method.
On a streaming request it reads the client's first message before it answers (at most
FIRST_MESSAGE_WAIT_S): an agent writes its registration first, and a write still in flight
when the call ends fails on the client's side, which then reports that failure (INTERNAL,
"Internal error from Core", no `tcl-leader`) instead of the answer (seen in CI under load)."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Literal, Protocol

import grpc

from tcluster.daemonkit.leaders import LEADER_METADATA, STANDBY_PREFIX
from tcluster.daemonkit.timeouts import wait_for
from tcluster.master.store.leadership import LeaderInfo

# Joining needs no leader's state machine; a new node may reach any master first.
EXEMPT_PREFIXES = ("/tcluster.v1.NodeJoin/",)
PortKind = Literal["client", "agent"]
FIRST_MESSAGE_WAIT_S = 2.0    # a streaming client that writes nothing is answered after this


class LeaderView(Protocol):
    def leading(self) -> bool: ...

    def leader(self) -> LeaderInfo | None: ...

    def why_no_leader(self) -> str: ...


class AlwaysLeader:
    """The SQLite single master: there is no election, so it always leads."""

    def leading(self) -> bool:
        return True

    def leader(self) -> LeaderInfo | None:
        return None

    def why_no_leader(self) -> str:
        return ""


class LeaderSlot:
    """The view the interceptors consult: built with the server, given the election's
    view once the master has joined it (until then, and with SQLite, always leading)."""

    def __init__(self) -> None:
        self.view: LeaderView = AlwaysLeader()

    def leading(self) -> bool:
        return self.view.leading()

    def leader(self) -> LeaderInfo | None:
        return self.view.leader()

    def why_no_leader(self) -> str:
        return self.view.why_no_leader()


def standby_answer(view: LeaderView, port_kind: PortKind) -> tuple[str, str]:
    """(details, tcl-leader address) for a call this standby refuses."""
    info = view.leader()
    address = "" if info is None else (info.client if port_kind == "client" else info.agent)
    if address:
        return f"{STANDBY_PREFIX}; the leader is at {address}", address
    why = view.why_no_leader() or "election in progress"
    return f"{STANDBY_PREFIX}; no master leads yet ({why})", ""


class StandbyInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call but joins while `view.leading()` is False (see the module doc)."""

    def __init__(self, view: LeaderView, port_kind: PortKind) -> None:
        if port_kind not in ("client", "agent"):
            raise ValueError(f"port_kind is 'client' or 'agent', not {port_kind!r}")
        self.view = view
        self.port_kind: PortKind = port_kind

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        # Asked per call, not per stream message: a stream opened while leading is the
        # leadership's business (a master that steps down re-executes itself).
        if handler is None or self.view.leading() or handler_call_details.method.startswith(EXEMPT_PREFIXES):
            return handler
        return _refusing_handler(handler, *standby_answer(self.view, self.port_kind))


def _refusing_handler(handler: grpc.RpcMethodHandler, details: str, leader: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as `handler` that aborts with UNAVAILABLE at once."""
    async def refuse(_request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, details, trailing_metadata=((LEADER_METADATA, leader),))

    async def refuse_after_first(requests: Any, context: grpc.aio.ServicerContext) -> None:
        await first_message(requests)
        await refuse(None, context)

    decode, encode = handler.request_deserializer, handler.response_serializer
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse_after_first, decode, encode)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse_after_first, decode, encode)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse, decode, encode)
    return grpc.unary_unary_rpc_method_handler(refuse, decode, encode)


async def first_message(requests: Any) -> None:
    """Waits for a streaming call's first message (or its end, or FIRST_MESSAGE_WAIT_S);
    what it holds, or fails to decode, does not matter: the call is refused either way."""
    try:
        await wait_for(anext(aiter(requests), None), FIRST_MESSAGE_WAIT_S)
    except Exception:   # the wait over, the call gone, an undecodable message: the same answer
        pass
