"""Leader election and fencing on etcd (docs/ha.md).

Each master holds a lease it keeps alive every TTL/3; the lease also carries
`P/masters/<id>`, so `tcl-master status` lists the live masters. A master campaigns by
creating `P/leader` under its lease only if the key does not exist; it leads from the
revision of that transaction (`leader_rev`) until the key goes. Every write the leader
makes compares the key's create revision with `leader_rev` (fencing), and the leader
also stops acting by itself once its local lease deadline passes (the time its last
keepalive was sent plus the TTL): a paused process that resumes sends nothing before
etcd has had a chance to tell it that another master leads.

Losing leadership is final for the process's term: `on_lost` is called once, and the
daemon re-executes itself as a standby (master/app/main.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import time
from dataclasses import asdict, dataclass
from typing import Callable

from tcluster.domain.errors import Unavailable
from tcluster.master.store.etcdbridge import EtcdBridge
from tcluster.etcd.kv import EtcdKV, EtcdUnavailable, create_revision_is, get_op, put
from tcluster.etcd.mirror import Mirror
from tcluster.daemonkit.timeouts import wait_for

log = logging.getLogger(__name__)


class NotLeader(Unavailable):
    """This master does not lead (any more): it changes nothing."""


@dataclass(frozen=True)
class LeaderInfo:
    id: str
    client: str           # where clients reach it (tcl, the CLI)
    agent: str            # where agents reach it (the mutual-TLS port, or the client port)
    http: str = ""        # its dashboard, if any

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def decode(raw: bytes | None) -> LeaderInfo | None:
        if not raw:
            return None
        try:
            data = json.loads(raw)
            return LeaderInfo(str(data["id"]), str(data["client"]), str(data["agent"]), str(data.get("http", "")))
        except (ValueError, KeyError, TypeError):
            return None


class Leadership:
    """One master's part in the election: its lease, its campaign, its fence."""

    def __init__(self, kv: EtcdKV, mirror: Mirror, me: LeaderInfo, ttl_s: int,
                 on_lost: Callable[[str], None], monotonic: Callable[[], float] = time.monotonic,
                 bridge: EtcdBridge | None = None) -> None:
        self.kv, self.mirror, self.me, self.ttl_s = kv, mirror, me, ttl_s
        # Renewals run on the bridge's own thread and loop when given (the daemon's case): a
        # master loop busy with thousands of agents must not let its lease lapse.
        self.bridge = bridge
        self.on_lost, self.monotonic = on_lost, monotonic
        self.leader_key = mirror.prefix + "leader"
        self.lease = 0
        self.leader_rev = 0
        self.deadline = 0.0            # monotonic: the lease is surely alive until then
        self.lost_reason = ""
        self.store_problem = ""        # why the last call to etcd failed, for standbys' answers
        self._vacant = asyncio.Event()
        self._keepalive: asyncio.Task[None] | concurrent.futures.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---- LeaderView (master/store/standby.py) ----

    def leading(self) -> bool:
        return bool(self.leader_rev) and not self.lost_reason and self.monotonic() < self.deadline

    def leader(self) -> LeaderInfo | None:
        return LeaderInfo.decode(self.mirror.get("leader"))

    def why_no_leader(self) -> str:
        if self.store_problem:
            return f"the store is unreachable: {self.store_problem}"
        return "an election is in progress"

    # ---- fencing ----

    def compares(self) -> list:   # type: ignore[type-arg]
        """Added to every state write: it applies only while our leader key stands."""
        return [create_revision_is(self.leader_key, self.leader_rev)]

    def check(self) -> None:
        if not self.leading():
            if self.leader_rev and not self.lost_reason:
                self.lose("the lease deadline passed before it was renewed")
            raise NotLeader(f"this master no longer leads ({self.lost_reason or 'not elected'}); retry: "
                            "another master takes over")

    def lose(self, reason: str) -> None:
        if self.lost_reason:
            return
        self.lost_reason = reason
        log.error("leadership lost: %s; this master stops acting now", reason)
        self.on_lost(reason)

    # ---- lifecycle ----

    async def start(self) -> None:
        """Grants the lease and announces this master under P/masters/."""
        sent = self.monotonic()
        self.lease = await self.kv.grant(self.ttl_s)
        self.deadline = sent + self.ttl_s
        await self.kv.txn([], [put(self.mirror.prefix + f"masters/{self.me.id}", self.me.encode(), self.lease)])
        self.mirror.listen("leader", self._on_leader_key)
        self._loop = asyncio.get_running_loop()
        if self.bridge is not None:
            self._keepalive = self.bridge.spawn(self._keep_alive(self.bridge.kv))
        else:
            self._keepalive = asyncio.create_task(self._keep_alive(self.kv), name="etcd-lease")

    async def stop(self, resign: bool = True) -> None:
        # A stop ends the term here, without on_lost: our own revoke deletes the leader key,
        # and its watch event must not read as a lost leadership (which re-executes the
        # daemon as a standby: a SIGTERM'd leader would restart instead of exiting).
        if not self.lost_reason:
            self.lost_reason = "this master is stopping"
        if self._keepalive is not None:
            self._keepalive.cancel()
        if resign and self.lease:
            try:    # a clean stop hands over at once instead of after the TTL
                await wait_for(self.kv.revoke(self.lease), 2.0)
            except (EtcdUnavailable, asyncio.TimeoutError):
                pass

    async def campaign(self) -> None:
        """Returns once this master leads and its copy holds everything before its term."""
        while True:
            self._vacant.clear()
            if self.mirror.get("leader") is None and await self._try_to_lead():
                await self.mirror.wait_for(self.leader_rev, timeout_s=max(10.0, 2.0 * self.ttl_s))
                log.info("leading from revision %d (lease %x)", self.leader_rev, self.lease)
                return
            try:
                await wait_for(self._vacant.wait(), 1.0)
            except asyncio.TimeoutError:
                pass

    async def _try_to_lead(self) -> bool:
        try:
            result = await self.kv.txn([create_revision_is(self.leader_key, 0)],
                                       [put(self.leader_key, self.me.encode(), self.lease)], [get_op(self.leader_key)])
        except EtcdUnavailable as error:
            self.store_problem = str(error)
            return False
        self.store_problem = ""
        if result.succeeded:
            self.leader_rev = result.revision
            return True
        held = result.ranges[0][0] if result.ranges and result.ranges[0] else None
        if held is not None and held.lease == self.lease and LeaderInfo.decode(held.value) == self.me:
            self.leader_rev = held.create_revision   # our own earlier attempt won (a retried call)
            return True
        return False

    def _on_leader_key(self, relative: str, value: bytes | None, revision: int) -> None:
        if relative != "leader":
            return
        if value is None:
            self._vacant.set()
            if self.leader_rev:
                self.lose("the leader key was deleted (lease expired or revoked)")
        elif self.leader_rev and revision != self.leader_rev and LeaderInfo.decode(value) != self.me:
            self.lose(f"another master leads: {value.decode(errors='replace')}")

    async def _keep_alive(self, kv: EtcdKV) -> None:
        """Renews every TTL/3 (on the bridge's loop, or the master's); the deadline only moves
        forward from the time a renewal was sent."""
        while not self.lost_reason:
            await asyncio.sleep(min(self.ttl_s / 3.0, max(0.05, self.deadline - self.monotonic())))
            sent = self.monotonic()
            try:
                left = await kv.keepalive(self.lease)
            except EtcdUnavailable as error:
                self.store_problem = str(error)
                if self.monotonic() >= self.deadline:
                    self._lose_from_renewal(f"the lease could not be renewed: {error}")
                continue
            self.store_problem = ""
            if left <= 0:
                self._lose_from_renewal("the lease expired")
            else:
                self.deadline = max(self.deadline, sent + left)

    def _lose_from_renewal(self, reason: str) -> None:
        """`lose` runs on the master's loop (its callback stops the daemon there)."""
        if self._loop is not None and self.bridge is not None:
            self._loop.call_soon_threadsafe(self.lose, reason)
        else:
            self.lose(reason)
