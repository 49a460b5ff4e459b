"""Assembles the master: store, cluster state, service, gRPC server, background loop."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import grpc

from tcluster.bounds import MAX_MESSAGE_BYTES
from tcluster.master.grpc_api import AgentServicer, ClusterServicer, JobServicer
from tcluster.master.listeners import SecureParts, bind_secure, check_exposure
from tcluster.master.service import MasterService
from tcluster.master.settings import MasterSettings
from tcluster.master.store import Store
from tcluster.master.users import UserDirectory
from tcluster.master.web.app import Dashboard
from tcluster.security.pki import MasterPki, load_master_pki
from tcluster.v1 import agent_pb2_grpc, jobs_pb2_grpc

log = logging.getLogger(__name__)

# Detect dead agents/peers even when no message is due (half-open TCP).
GRPC_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]


@dataclass
class RunningMaster:
    server: grpc.aio.Server
    service: MasterService
    store: Store
    port: int
    loop_task: asyncio.Task[None]
    dashboard: Dashboard | None = None
    secure_parts: SecureParts | None = None   # TLS and the agent port (DATA_DIR/pki exists)

    @property
    def http_port(self) -> int:
        return self.dashboard.port if self.dashboard is not None else 0

    @property
    def secure(self) -> bool:
        return self.secure_parts is not None

    @property
    def agent_port(self) -> int:
        """Where agents connect: the client port itself on an insecure master."""
        return self.secure_parts.agent_port if self.secure_parts is not None else self.port

    async def stop(self, grace_s: float = 1.0) -> None:
        self.loop_task.cancel()
        for link in list(self.service.links.values()):
            link.close()
        await self.server.stop(grace_s)
        if self.secure_parts is not None:
            await self.secure_parts.stop(grace_s)
        if self.dashboard is not None:
            await self.dashboard.stop()
        # The committer's thread may be writing: the store closes only once it is idle.
        for _ in range(500):
            if self.service.committer.idle:
                break
            await asyncio.sleep(0.01)
        self.store.close()
        if self.service.gate.users is not None:
            self.service.gate.users.close()


def _bind(settings: MasterSettings, pki: MasterPki | None, server: grpc.aio.Server,
          service: MasterService) -> tuple[int, SecureParts | None]:
    """Plaintext, everything on one port; or TLS for clients and a mutual-TLS agent server."""
    if pki is None:
        agent_pb2_grpc.add_AgentServiceServicer_to_server(AgentServicer(service), server)
        return server.add_insecure_port(settings.listen), None
    return bind_secure(settings, pki, server, GRPC_OPTIONS, lambda agent_server, guard:
                       agent_pb2_grpc.add_AgentServiceServicer_to_server(AgentServicer(service, guard), agent_server))


async def start_master(settings: MasterSettings) -> RunningMaster:
    pki = load_master_pki(settings.data_dir)
    check_exposure(settings, pki)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = Store(settings.db_path)
    service = MasterService(settings, store)
    if pki is not None:     # a secure master: callers need a user token
        service.gate.users = UserDirectory(settings.data_dir)
    server = grpc.aio.server(options=GRPC_OPTIONS)
    jobs_pb2_grpc.add_JobServiceServicer_to_server(JobServicer(service), server)
    jobs_pb2_grpc.add_ClusterServiceServicer_to_server(ClusterServicer(service), server)
    try:
        port, secure = _bind(settings, pki, server, service)
    except OSError:
        store.close()
        raise
    if port == 0:
        store.close()
        raise OSError(f"cannot listen on {settings.listen} (address in use or not local?)")
    dashboard = Dashboard(service, settings) if settings.http else None
    try:
        if dashboard is not None:
            await dashboard.start(settings.http)
    except OSError as error:
        if not settings.http_optional:
            store.close()
            if secure is not None:
                secure.auth.close()
            raise OSError(f"cannot serve HTTP on {settings.http}: {error.strerror or error}") from error
        # --http was not asked for: a second master on one host still starts, without a dashboard
        log.warning("no dashboard: cannot serve HTTP on %s (%s); use --http ADDR", settings.http,
                    error.strerror or error)
        dashboard = None
    await server.start()
    if secure is not None:
        await secure.agent_server.start()
        secure.start_sweeper()
    loop_task = asyncio.create_task(service.run(), name="master-loop")
    log.info("gRPC bound to port %d%s; state in %s", port,
             f" (TLS; agents on port {secure.agent_port}, mutual TLS)" if secure else "", settings.db_path)
    return RunningMaster(server, service, store, port, loop_task, dashboard, secure)
