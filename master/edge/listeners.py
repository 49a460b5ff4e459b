"""The master's listeners: one plaintext port (no PKI), or, once `tcl-master init` made
DATA_DIR/pki, a TLS client port (jobs, cluster, join) and a mutual-TLS agent port.

Two ports because grpc cannot ask for a client certificate optionally on one port:
require_client_auth=False means "don't ask", and the client port must serve callers
that have none (users, nodes about to join)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from dataclasses import dataclass
from typing import Callable

import grpc

from tcluster.daemonkit.listen import bind_port
from tcluster.domain.errors import FailedPrecondition
from tcluster.master.edge.join_api import JoinServicer
from tcluster.master.identity.joining import NodeGuard, NodeJoin
from tcluster.master.identity.records import AuthStore
from tcluster.master.identity.nodeauth import NodeAuth
from tcluster.master.settings import MasterSettings
from tcluster.security.pki import MasterPki
from tcluster.v1 import join_pb2_grpc

log = logging.getLogger(__name__)
REVOKE_CHECK_S = 1.0    # an open stream of a revoked node is closed within about this


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(settings: MasterSettings, pki: MasterPki | None) -> None:
    """Plaintext only on loopback, unless the operator says --insecure (and is told what that means)."""
    if pki is not None or is_loopback(settings.listen.rpartition(":")[0]):
        return
    if not settings.insecure:
        raise FailedPrecondition(
            f"refusing to serve {settings.listen} without TLS: anyone who reaches it could run programs on "
            f"every node and register fake nodes. Run `tcl-master init --data-dir {settings.data_dir} "
            "--advertise HOST` first, or pass --insecure to accept that on a trusted network")
    log.warning("INSECURE: serving %s without TLS or authentication (--insecure). Anyone who can reach this "
                "address can submit jobs that run on every node, read and cancel any job, and register as any "
                "node. Use `tcl-master init` for a real cluster.", settings.listen)


def agent_address(settings: MasterSettings, client_port: int) -> str:
    if settings.agent_listen:
        return settings.agent_listen
    host, _, port = settings.listen.rpartition(":")
    return f"{host}:{0 if int(port) == 0 else client_port + 1}"


@dataclass
class SecureParts:
    agent_server: grpc.aio.Server
    agent_port: int
    auth: AuthStore
    guard: NodeGuard
    sweeper: asyncio.Task[None] | None = None

    def start_sweeper(self) -> None:
        self.sweeper = asyncio.create_task(self._sweep(), name="revocation-sweep")

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(REVOKE_CHECK_S)
            try:
                self.guard.sweep()
            except Exception:   # a locked or broken auth.db must not stop the master
                log.exception("revocation check failed; trying again")

    async def stop(self, grace_s: float) -> None:
        if self.sweeper is not None:
            self.sweeper.cancel()
        await self.agent_server.stop(grace_s)
        self.auth.close()


def bind_secure(settings: MasterSettings, pki: MasterPki, client: grpc.aio.Server, options: list[tuple[str, object]],
                add_agent_service: Callable[[grpc.aio.Server, NodeGuard], None],
                agent_interceptors: list[grpc.aio.ServerInterceptor] | None = None,
                auth: AuthStore | None = None,
                agent_addresses: Callable[[int], list[str]] | None = None) -> tuple[int, SecureParts]:
    """Binds the TLS client port on `client` and a new mutual-TLS agent server; adds NodeJoin.
    `auth` is the identity store (master/identity/choice.py:open_auth_store), DATA_DIR/auth.db if
    not given; the returned parts close it when they stop."""
    server_creds = grpc.ssl_server_credentials([(pki.key_pem, pki.cert_chain_pem)])
    port = bind_port(lambda address: client.add_secure_port(address, server_creds), settings.listen, "--listen")
    if auth is None:
        auth = NodeAuth(settings.data_dir)
    guard = NodeGuard(auth)
    agent_server = grpc.aio.server(options=options, interceptors=agent_interceptors or [])
    add_agent_service(agent_server, guard)
    address = agent_address(settings, port)
    mutual = grpc.ssl_server_credentials([(pki.key_pem, pki.cert_chain_pem)], root_certificates=pki.ca_pem,
                                         require_client_auth=True)
    try:
        agent_port = bind_port(lambda where: agent_server.add_secure_port(where, mutual), address, "--agent-listen")
    except OSError:
        auth.close()
        raise
    addresses = (lambda: agent_addresses(agent_port)) if agent_addresses is not None else (lambda: [])
    join_pb2_grpc.add_NodeJoinServicer_to_server(JoinServicer(NodeJoin(pki, auth, agent_port, addresses)), client)
    return port, SecureParts(agent_server, agent_port, auth, guard)
