"""The NodeJoin servicer: convert, call NodeJoin, convert back."""

from __future__ import annotations

import grpc

from tcluster.domain.errors import InvalidArgument, TclusterError
from tcluster.master.edge.grpc_api import abort_with, send_master_time   # the one status table lives there
from tcluster.master.identity.joining import NodeJoin
from tcluster.v1 import join_pb2, join_pb2_grpc

MAX_CSR_BYTES = 16 * 1024


class JoinServicer(join_pb2_grpc.NodeJoinServicer):
    def __init__(self, joiner: NodeJoin) -> None:
        self.joiner = joiner

    async def Join(self, request: join_pb2.JoinRequest, context: grpc.aio.ServicerContext) -> join_pb2.JoinResponse:
        await send_master_time(context)
        try:
            if len(request.csr_pem) > MAX_CSR_BYTES:
                raise InvalidArgument("csr_pem", f"at most {MAX_CSR_BYTES} bytes")
            result = self.joiner.join(request.token, request.node, bytes(request.csr_pem))
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")
        return join_pb2.JoinResponse(cert_pem=result.cert_pem, ca_pem=result.ca_pem, agent_port=result.agent_port,
                                     labels=result.labels, node=result.node,
                                     agent_addresses=list(result.agent_addresses))
