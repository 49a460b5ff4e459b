"""What a master answers while it does not lead (docs/ha.md): UNAVAILABLE, the leader's
address in the details and in the `tcl-leader` trailing metadata. (Provisional: the
full interceptor lands from the haclient branch.)"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Literal, Protocol

import grpc

from tcluster.master.leadership import LeaderInfo

LEADER_METADATA = "tcl-leader"
PortKind = Literal["client", "agent"]


class LeaderView(Protocol):
    def leading(self) -> bool: ...
    def leader(self) -> LeaderInfo | None: ...
    def why_no_leader(self) -> str: ...


class AlwaysLeader:
    """The SQLite single master."""

    def leading(self) -> bool:
        return True

    def leader(self) -> LeaderInfo | None:
        return None

    def why_no_leader(self) -> str:
        return ""


class LeaderSlot:
    """The view the interceptors consult; the server sets it once the election is joined."""

    def __init__(self) -> None:
        self.view: LeaderView = AlwaysLeader()

    def leading(self) -> bool:
        return self.view.leading()

    def leader(self) -> LeaderInfo | None:
        return self.view.leader()

    def why_no_leader(self) -> str:
        return self.view.why_no_leader()


class StandbyInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, view: LeaderView, port_kind: PortKind) -> None:
        self.view, self.port_kind = view, port_kind

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if self.view.leading() or details.method.startswith("/tcluster.v1.NodeJoin/") or handler is None:
            return handler
        leader = self.view.leader()
        address = (leader.client if self.port_kind == "client" else leader.agent) if leader else ""
        message = (f"this master is a standby; the leader is at {address}" if address else
                   f"this master is a standby; no master leads yet ({self.view.why_no_leader()})")

        async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
            context.set_trailing_metadata(((LEADER_METADATA, address),))
            await context.abort(grpc.StatusCode.UNAVAILABLE, message)
        codec = dict(request_deserializer=handler.request_deserializer,
                     response_serializer=handler.response_serializer)
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(refuse, **codec)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(refuse, **codec)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(refuse, **codec)
        return grpc.unary_unary_rpc_method_handler(refuse, **codec)
