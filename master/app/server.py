"""Assembles the master: store, cluster state, service, gRPC server, background loop.

With SQLite the master leads from the start. With etcd (docs/ha.md) it binds its ports,
joins the election and answers as a standby (master/store/standby.py) until it wins; only then
does it build the service from its warm copy, start the dashboard and begin acting."""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import grpc

from tcluster.daemonkit.listen import bind_port
from tcluster.wire.channels import SERVER_GRPC_OPTIONS
from tcluster.domain.errors import Unavailable
from tcluster.master.identity.records import AuthStore
from tcluster.master.identity.choice import open_auth_store
from tcluster.master.edge.grpc_api import AgentServicer, ClusterServicer, JobServicer
from tcluster.master.store.leadership import LeaderInfo, Leadership
from tcluster.master.identity import pkicache
from tcluster.master.edge.listeners import SecureParts, bind_secure, check_exposure
from tcluster.master.app.assemble import assemble
from tcluster.master.service import MasterService
from tcluster.master.settings import MasterSettings
from tcluster.master.store.standby import LeaderSlot, StandbyInterceptor
from tcluster.master.store.base import StateStore
from tcluster.master.store.sqlite import Store
from tcluster.master.identity.users import UserDirectory
from tcluster.security.pki import MasterPki, load_master_pki
from tcluster.master.edge.federation_api import LocalManagerServicer
from tcluster.master.edge.gm_jobs_api import GMJobServicer
from tcluster.master.identity.gmguard import GMGuard
from tcluster.v1 import agent_pb2_grpc, federation_pb2_grpc, jobs_pb2_grpc

if TYPE_CHECKING:     # imported where used: a master on SQLite, or without --http, starts without them
    from tcluster.etcd.kv import EtcdKV
    from tcluster.etcd.mirror import Mirror
    from tcluster.master.store.etcdbridge import EtcdBridge
    from tcluster.master.web.app import Dashboard
    from tcluster.master.web.standby import StandbyHttp

log = logging.getLogger(__name__)

@dataclass
class Election:
    """The etcd parts of a master that takes turns leading."""
    kv: EtcdKV
    mirror: Mirror
    leadership: Leadership
    bridge: EtcdBridge          # lease renewals and state writes, on a thread of their own

    async def close(self, resign: bool) -> None:
        await self.leadership.stop(resign)
        await self.mirror.stop()
        await self.kv.close()
        await asyncio.to_thread(self.bridge.close)


@dataclass
class RunningMaster:
    server: grpc.aio.Server
    settings: MasterSettings
    port: int
    servicers: list[Any]
    slot: LeaderSlot
    store: StateStore | None = None
    service: MasterService | None = None       # None while a standby
    loop_task: asyncio.Task[None] | None = None
    dashboard: Dashboard | None = None
    standby_http: StandbyHttp | None = None   # --http while a standby (etcd): health and metrics only
    secure_parts: SecureParts | None = None   # TLS and the agent port (DATA_DIR/pki exists)
    bound_pki: MasterPki | None = None        # what the ports were bound with (checked before leading)
    pki_checked: bool = False                 # bound_pki was found to be etcd's (_check_pki)
    election: Election | None = None
    promotion: asyncio.Task[None] | None = None
    leading: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def http_port(self) -> int:
        if self.dashboard is not None:
            return self.dashboard.port
        return self.standby_http.port if self.standby_http is not None else 0

    @property
    def secure(self) -> bool:
        return self.secure_parts is not None

    @property
    def agent_port(self) -> int:
        """Where agents connect: the client port itself on an insecure master."""
        return self.secure_parts.agent_port if self.secure_parts is not None else self.port

    async def stop(self, grace_s: float = 1.0, resign: bool = True) -> None:
        if self.promotion is not None:
            self.promotion.cancel()
        if self.loop_task is not None:
            self.loop_task.cancel()
        if self.service is not None:
            for link in list(self.service.agents.links.values()):
                link.close()
        await self.server.stop(grace_s)
        if self.secure_parts is not None:
            await self.secure_parts.stop(grace_s)
        if self.dashboard is not None:
            await self.dashboard.stop()
        if self.standby_http is not None:
            await self.standby_http.stop()
        # The committer's thread may be writing: the store closes only once it is idle.
        for _ in range(500):
            if self.service is None or self.service.committer.idle:
                break
            await asyncio.sleep(0.01)
        if self.store is not None:
            self.store.close()
        if self.service is not None and self.service.ledger is not None:
            self.service.ledger.close()
        if self.election is not None:
            await self.election.close(resign)
        if self.service is not None and self.service.gate.users is not None:
            self.service.gate.users.close()

    async def lead(self, store: StateStore, acting: Callable[[], bool] = lambda: True) -> None:
        """Becomes the acting master: the service (from the store), dashboard, loop."""
        settings = self.settings
        assembled = assemble(settings, store, acting=acting)
        service = assembled.service
        if self.secure:     # a secure master: callers need a user token
            auth = self.secure_parts.auth if self.election is not None and self.secure_parts else None
            service.gate.users = UserDirectory(auth if auth is not None else settings.data_dir)
        for servicer in self.servicers:
            servicer.service = service
            if isinstance(servicer, LocalManagerServicer):
                servicer.lm = assembled.federation
        self.store, self.service = store, service
        address = settings.http
        if self.standby_http is not None:      # the dashboard takes its address (and port) over
            address = f"{settings.http.rpartition(':')[0]}:{self.standby_http.port}"
            await self.standby_http.stop()
            self.standby_http = None
        self.dashboard = await _start_dashboard(service, settings, address)
        self.loop_task = asyncio.create_task(service.rounds.run(), name="master-loop")
        self.leading.set()


async def _start_dashboard(service: MasterService, settings: MasterSettings, address: str) -> Dashboard | None:
    if not settings.http:
        return None
    from tcluster.master.web.app import Dashboard
    dashboard = Dashboard(service, settings)
    return dashboard if await _served(dashboard.start(address), settings, "dashboard") else None


async def _start_standby_http(settings: MasterSettings) -> StandbyHttp | None:
    """A standby's health and metrics on --http, until it leads."""
    if not settings.http:
        return None
    from tcluster.master.web.standby import StandbyHttp
    standby = StandbyHttp()
    return standby if await _served(standby.start(settings.http), settings, "standby health endpoint") else None


async def _served(starting: Awaitable[int], settings: MasterSettings, what: str) -> bool:
    """Whether the HTTP server came up. A taken address is an error when --http was asked
    for; otherwise (the default address) a second master on one host still starts, without
    `what`, and says so."""
    try:
        await starting
    except OSError as error:
        if not settings.http_optional:
            raise OSError(f"cannot serve HTTP on {settings.http}: {error.strerror or error}") from error
        log.warning("no %s: cannot serve HTTP on %s (%s); use --http ADDR", what, settings.http,
                    error.strerror or error)
        return False
    return True


def _bind(settings: MasterSettings, pki: MasterPki | None, server: grpc.aio.Server, servicers: list[Any],
          agent_interceptors: list[grpc.aio.ServerInterceptor], auth: AuthStore | None,
          mirror: Mirror | None) -> tuple[int, SecureParts | None]:
    """Plaintext, everything on one port; or TLS for clients and a mutual-TLS agent server."""
    if pki is None:
        servicers.append(AgentServicer(None))  # type: ignore[arg-type]
        agent_pb2_grpc.add_AgentServiceServicer_to_server(servicers[-1], server)
        return bind_port(server.add_insecure_port, settings.listen, "--listen"), None

    def add_agent(agent_server: grpc.aio.Server, guard: Any) -> None:
        servicers.append(AgentServicer(None, guard))  # type: ignore[arg-type]
        agent_pb2_grpc.add_AgentServiceServicer_to_server(servicers[-1], agent_server)
        # the LM service for GMs with a certificate of this cluster (mutual TLS exists only here)
        servicers.append(LocalManagerServicer(None, GMGuard(guard.auth)))  # type: ignore[arg-type]
        federation_pb2_grpc.add_LocalManagerServiceServicer_to_server(servicers[-1], agent_server)
        jobs_pb2_grpc.add_JobServiceServicer_to_server(GMJobServicer(servicers[0], GMGuard(guard.auth)), agent_server)
    masters = (lambda own_port: _agent_addresses(mirror, own_port)) if mirror is not None else None
    return bind_secure(settings, pki, server, list(SERVER_GRPC_OPTIONS), add_agent, agent_interceptors, auth, masters)


def _agent_addresses(mirror: Mirror, own_port: int) -> list[str]:
    """What a joining node is told to dial: every live master's agent address (this one's
    is among them: it registered under P/masters/ when it joined the election)."""
    return [info.agent for _, raw in mirror.items("masters") if (info := LeaderInfo.decode(raw)) is not None]


def advertised(settings: MasterSettings, port: int, agent_port: int, http_port: int) -> LeaderInfo:
    """How other masters name this one to clients and agents."""
    if settings.advertise:
        host = settings.advertise.rpartition(":")[0]
        client = settings.advertise
    else:
        host = settings.listen.rpartition(":")[0]
        host = socket.getfqdn() if host in ("0.0.0.0", "::", "[::]", "") else host
        client = f"{host}:{port}"
    http = f"{host}:{http_port}" if http_port else ""
    return LeaderInfo(id=client, client=client, agent=f"{host}:{agent_port}", http=http)


async def start_master(settings: MasterSettings, on_lost: Callable[[str], None] | None = None,
                       stepped_down_insecure: bool = False) -> RunningMaster:
    """Serving; with SQLite already leading, with etcd leading once `leading` is set.
    `on_lost` (etcd): called once if this master loses its leadership or its lease.
    `stepped_down_insecure`: this process is the re-execution of a master that found its
    cluster insecure in etcd (main.py); if etcd does not answer, it opens its ports as a
    plaintext standby at once instead of waiting (it still checks before leading)."""
    opened = await _open_copy(settings, stepped_down_insecure) if settings.store_url.kind == "etcd" else None
    copy = opened[:2] if opened is not None else None
    try:
        master = await _serve_ports(settings, copy, opened[2] if opened is not None else None)
    except BaseException:
        if copy is not None:
            await copy[1].stop()
            await copy[0].close()
        raise
    try:
        if copy is None:
            await master.lead(Store(settings.db_path))
        else:
            master.standby_http = await _start_standby_http(settings)
            master.election = _join_election(master, *copy, on_lost or (lambda reason: None))
    except BaseException:
        await master.stop(0)
        raise
    await master.server.start()
    if master.secure_parts is not None:
        await master.secure_parts.agent_server.start()
        master.secure_parts.start_sweeper()
    log.info("gRPC bound to port %d%s; store %s", master.port, f" (TLS; agents on port {master.agent_port}, "
             "mutual TLS)" if master.secure else "", settings.store_url)
    return master


async def _serve_ports(settings: MasterSettings, copy: tuple[EtcdKV, Mirror] | None,
                       etcd_pki: MasterPki | None) -> RunningMaster:
    """Binds the client (and agent) ports; the servicers get their service when it leads."""
    if copy is None:
        pki, auth = load_master_pki(settings.data_dir), None
    else:
        pki = etcd_pki
        auth = open_auth_store(settings.store, settings.store_prefix, settings.data_dir, copy[1]) if pki else None
    check_exposure(settings, pki)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    slot = LeaderSlot()
    server = grpc.aio.server(options=list(SERVER_GRPC_OPTIONS), interceptors=[StandbyInterceptor(slot, "client")])
    servicers: list[Any] = [JobServicer(None), ClusterServicer(None)]  # type: ignore[arg-type]
    jobs_pb2_grpc.add_JobServiceServicer_to_server(servicers[0], server)
    jobs_pb2_grpc.add_ClusterServiceServicer_to_server(servicers[1], server)
    servicers.append(LocalManagerServicer(None))  # type: ignore[arg-type]
    federation_pb2_grpc.add_LocalManagerServiceServicer_to_server(servicers[-1], server)
    try:
        port, secure = _bind(settings, pki, server, servicers, [StandbyInterceptor(slot, "agent")], auth,
                             copy[1] if copy is not None else None)
    except BaseException:
        if auth is not None:
            auth.close()
        raise
    if port == 0:
        raise OSError(f"cannot listen on {settings.listen} (address in use or not local?)")
    return RunningMaster(server, settings, port, servicers, slot, secure_parts=secure, bound_pki=pki)


def _pki_cache(settings: MasterSettings) -> Path:
    return pkicache.cache_dir(settings.data_dir, settings.store_url.endpoints, settings.store_prefix)


async def _open_copy(settings: MasterSettings,
                     stepped_down_insecure: bool = False) -> tuple[EtcdKV, Mirror, MasterPki | None]:
    """The warm copy of the prefix and the PKI in it. If etcd does not answer, the PKI
    cached by an earlier start (master/identity/pkicache.py) lets the ports open at once and the
    copy loads later (checked against etcd before campaigning: _check_pki); a start without
    a cached PKI (a first one, or an insecure cluster's) waits for etcd instead of exiting."""
    from tcluster.etcd.kv import EtcdKV
    from tcluster.etcd.mirror import Mirror
    from tcluster.master.identity.etcdpki import pki_in_mirror
    url = settings.store_url
    kv = EtcdKV(list(url.endpoints), tls=url.tls)
    mirror = Mirror(kv, settings.store_prefix)
    cache = _pki_cache(settings)
    delay = 0.2
    while True:
        try:
            await mirror.start()
            pki = pki_in_mirror(mirror, settings.store_prefix)
            pkicache.save(cache, pki)
            return kv, mirror, pki
        except Unavailable as error:
            pki = pkicache.load(cache)
            if pki is not None or stepped_down_insecure:
                log.warning("etcd unreachable (%s); serving as a standby with %s until it answers", error,
                            "the cached PKI" if pki else "no TLS, as before this master stepped down")
                return kv, mirror, pki
            log.warning("etcd unreachable (%s); retrying", error)
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)


def _check_pki(master: RunningMaster, mirror: Mirror) -> str | None:
    """Why this master must not lead (None: it may): the PKI in etcd, now loaded, is not
    the one its ports were bound with. etcd's is cached for the restart that follows."""
    from tcluster.master.identity.etcdpki import pki_in_mirror
    settings = master.settings
    try:
        held = pki_in_mirror(mirror, settings.store_prefix)
    except Exception as error:   # noqa: BLE001 - a partial or unreadable PKI: never lead on it
        return f"the PKI in etcd prefix {settings.store_prefix} is unreadable: {error}"
    why = pkicache.mismatch(master.bound_pki, held, f"etcd prefix {settings.store_prefix}")
    if why is not None:
        pkicache.save(_pki_cache(settings), held)
    return why


async def _load_copy(mirror: Mirror, leadership: Leadership) -> None:
    delay = 0.2
    while mirror.revision == 0:
        try:
            await mirror.start()
        except Unavailable as error:
            leadership.store_problem = str(error)
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)


def _join_election(master: RunningMaster, kv: EtcdKV, mirror: Mirror, on_lost: Callable[[str], None]) -> Election:
    """Answers as a standby at once; joins the election, campaigns and leads in the background."""
    settings = master.settings
    from tcluster.master.store.etcdbridge import EtcdBridge
    me = advertised(settings, master.port, master.agent_port, _http_port_guess(settings))
    bridge = EtcdBridge(list(settings.store_url.endpoints), tls=settings.store_url.tls)
    leadership = Leadership(kv, mirror, me, settings.lease_ttl_s, on_lost, bridge=bridge)
    master.slot.view = leadership

    async def promote() -> None:
        await _load_copy(mirror, leadership)
        refused = _check_pki(master, mirror)
        master.pki_checked = refused is None
        if refused is not None:
            # The ports cannot be re-bound in place: main re-executes the master (the same
            # pid, as after a lost lease), which binds with etcd's PKI; no term was begun.
            log.error("refusing to lead: %s; restarting to bind with the PKI etcd holds", refused)
            leadership.lose(f"refusing to lead: {refused}")
            return
        await _reach_store(leadership)
        try:
            await leadership.campaign()
            from tcluster.master.store.etcd import EtcdStore
            await master.lead(EtcdStore(kv, mirror, leadership, settings.store_max_txn_ops, bridge=bridge),
                              acting=leadership.leading)
        except Exception as error:    # holding the key without acting would stall the cluster
            log.exception("could not take over")
            leadership.lose(f"could not take over: {error}")
            await leadership.stop(resign=True)     # the others need not wait out the lease
            return
        log.info("this master (%s) leads", me.client)
        await _compact_history(kv, mirror, leadership)
    master.promotion = asyncio.create_task(promote(), name="campaign")
    return Election(kv, mirror, leadership, bridge)


async def _reach_store(leadership: Leadership) -> None:
    """Grants the lease and announces this master, retrying while etcd has no quorum."""
    delay = 0.2
    while True:
        try:
            await leadership.start()
            leadership.store_problem = ""
            return
        except Unavailable as error:
            leadership.store_problem = str(error)
            log.warning("etcd unreachable (%s); retrying", error)
            await asyncio.sleep(delay)
            delay = min(2.0, delay * 2)


COMPACT_EVERY_S = 300.0


async def _compact_history(kv: EtcdKV, mirror: Mirror, leadership: Leadership) -> None:
    """etcd keeps every revision until compacted; like Kubernetes' API server, the leader
    compacts every few minutes to the revision it saw one period earlier (a standby whose
    watch falls that far behind reloads its copy)."""
    previous = 0
    while leadership.leading():
        await asyncio.sleep(COMPACT_EVERY_S)
        if previous and leadership.leading():
            try:
                await kv.compact(previous)
            except Exception as error:   # noqa: BLE001 - already compacted, or etcd busy: next period
                log.info("etcd compaction to %d skipped: %s", previous, error)
        previous = mirror.revision


def _http_port_guess(settings: MasterSettings) -> int:
    """The dashboard's port as configured (a port-0 dashboard is not advertised)."""
    if not settings.http:
        return 0
    port = settings.http.rpartition(":")[2]
    return int(port) if port.isdigit() else 0
