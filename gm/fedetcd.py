"""GM membership, the queue map and takeover claims in etcd (the I/O edge of
gm/ownership.py, which decides). Keys under the prefix (default /tcluster-gm):

    members/<gm>   {"name", "index", "address"}   bound to the GM's lease (kept alive every TTL/3)
    queues/<queue> <home gm>                       no lease: seeded from --queue-map if absent,
                                                   changed with `tcl-gm queues set`
    claims/<queue> <claimant gm>                   bound to the claimant's lease

A GM serves only while its lease is surely alive (the last keepalive sent plus the TTL,
as the master's leader fence does): past that, etcd may already have handed its queues
to another GM, so it refuses Submits (UNAVAILABLE) until it has registered again."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import grpc
from aetcd.rpc import rpc_pb2 as pb

from tcluster.domain.errors import Unavailable
from tcluster.gm.ownership import Facts, Member, owner_of, to_claim, to_release
from tcluster.etcd.url import StoreUrl, parse_store_url
from tcluster.etcd.kv import EtcdKV, EtcdRefused, EtcdUnavailable, create_revision_is, delete, put
from tcluster.etcd.mirror import Mirror

log = logging.getLogger("tcluster.gm.etcd")


class NotServing(Unavailable):
    """This GM's lease is not surely alive: it owns nothing until it registers again."""


def etcd_url(text: str) -> StoreUrl:
    """'h:p,h:p' or 'etcd://h:p,h:p[?cacert=...]' -> StoreUrl; ValueError otherwise."""
    return parse_store_url(text if text.startswith("etcd://") else "etcd://" + text, Path("."), check_files=False)


def value_is(key: str, value: bytes) -> pb.Compare:   # type: ignore[name-defined]
    return pb.Compare(result=pb.Compare.EQUAL, target=pb.Compare.VALUE, key=key.encode(), value=value)


def member_of(raw: bytes) -> Member | None:
    try:
        d = json.loads(raw)
        return Member(str(d["name"]), int(d["index"]), str(d["address"]))
    except (ValueError, KeyError, TypeError):
        return None


class EtcdMembership:
    def __init__(self, url: StoreUrl, prefix: str, me: Member, ttl_s: int, seed: dict[str, str],
                 monotonic=time.monotonic) -> None:
        self.url, self.me, self.ttl_s, self.seed = url, me, ttl_s, dict(seed)
        self.kv = EtcdKV(list(url.endpoints), tls=url.tls)
        self.mirror = Mirror(self.kv, prefix)
        self.prefix = self.mirror.prefix
        self.monotonic = monotonic
        self.lease = 0
        self.deadline = 0.0
        self.revoke_on_stop = True          # a graceful stop hands the queues over at once
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # ---- facts (from the warm copy) ----

    def facts(self) -> Facts:
        alive = {m.name: m for m in (member_of(raw) for _, raw in self.mirror.items("members")) if m is not None}
        queues = {k.rpartition("/")[2]: v.decode() for k, v in self.mirror.items("queues")}
        claims = {k.rpartition("/")[2]: v.decode() for k, v in self.mirror.items("claims")}
        return Facts(queues, alive, claims)

    def serving(self) -> bool:
        return bool(self.lease) and self.monotonic() < self.deadline

    def owner_of(self, queue: str) -> str | None:
        if not self.serving():
            raise NotServing(f"GM {self.me.name} has no live lease in etcd ({','.join(self.url.endpoints)}); "
                             "it accepts nothing until it registers again: retry, or submit to another GM")
        return owner_of(self.facts(), queue)

    def address_of(self, name: str) -> str | None:
        m = self.facts().alive.get(name)
        return m.address if m else None

    # ---- life ----

    async def start(self) -> None:
        await self._register()
        for queue, home in sorted(self.seed.items()):
            key = self.prefix + f"queues/{queue}"
            await self.kv.txn([create_revision_is(key, 0)], [put(key, home.encode())])
        await self.mirror.start()
        self.mirror.listen("", lambda *_: self._changed.set())
        self._changed.set()
        self._tasks = [asyncio.create_task(self._keepalive()), asyncio.create_task(self._reconcile())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.mirror.stop()
        if self.revoke_on_stop and self.lease:
            try:
                await self.kv.revoke(self.lease)       # its member key and claims go now, not after the TTL
            except EtcdUnavailable as e:
                log.warning("could not revoke the lease: %s", e)
        await self.kv.close()

    async def _register(self) -> None:
        sent = self.monotonic()
        lease = await self.kv.grant(self.ttl_s)
        body = json.dumps({"name": self.me.name, "index": self.me.index, "address": self.me.address}).encode()
        await self.kv.txn([], [put(self.prefix + f"members/{self.me.name}", body, lease)])
        self.lease, self.deadline = lease, sent + self.ttl_s
        log.info("GM %s registered in etcd (lease %x, TTL %ds)", self.me.name, lease, self.ttl_s)

    async def _keepalive(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            try:
                await self._renew()
            except (EtcdUnavailable, EtcdRefused, grpc.aio.AioRpcError) as e:
                log.warning("GM %s: etcd keepalive failed (%s); it stops serving at its lease deadline",
                            self.me.name, e)

    async def _renew(self) -> None:
        if self.lease:
            sent = self.monotonic()
            if await self.kv.keepalive(self.lease) > 0:
                self.deadline = sent + self.ttl_s
                return
            log.error("GM %s: its etcd lease expired; another GM may serve its queues: registering again",
                      self.me.name)
            self.lease = 0
        await self._register()
        self._changed.set()

    async def _reconcile(self) -> None:
        """Claims orphaned queues and releases the ones whose home came back."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            if not self.serving():
                continue
            facts = self.facts()
            try:
                for queue in to_claim(facts, self.me.name):
                    key = self.prefix + f"claims/{queue}"
                    done = await self.kv.txn([create_revision_is(key, 0)], [put(key, self.me.name.encode(),
                                                                                self.lease)])
                    log.info("GM %s %s queue %r (home %s is not alive)", self.me.name,
                             "took over" if done.succeeded else "lost the race for", queue, facts.queue_map[queue])
                for queue in to_release(facts, self.me.name):
                    key = self.prefix + f"claims/{queue}"
                    await self.kv.txn([value_is(key, self.me.name.encode())], [delete(key)])
                    log.info("GM %s hands queue %r back to its home %s", self.me.name, queue,
                             facts.queue_map.get(queue))
            except (EtcdUnavailable, EtcdRefused, grpc.aio.AioRpcError) as e:
                log.warning("GM %s: etcd: %s; trying again", self.me.name, e)
                await asyncio.sleep(0.5)
                self._changed.set()


async def set_queues(url: StoreUrl, prefix: str, mapping: dict[str, str], remove: list[str]) -> dict[str, str]:
    """The operator's change to the map (one transaction); the map after it."""
    kv = EtcdKV(list(url.endpoints), tls=url.tls)
    base = prefix.rstrip("/") + "/queues/"
    try:
        ops = [put(base + q, g.encode()) for q, g in mapping.items()] + [delete(base + q) for q in remove]
        if ops:
            await kv.txn([], ops)
        kvs, _ = await kv.range_prefix(base)
        return {k.key[len(base):]: k.value.decode() for k in kvs}
    finally:
        await kv.close()


async def start_membership(settings, port: int) -> EtcdMembership:   # settings: GMSettings
    host = settings.listen.rpartition(":")[0]
    if host in ("0.0.0.0", "[::]", "::", ""):        # peers need a name they can reach
        import socket
        host = socket.getfqdn()
    me = Member(settings.name, settings.index, f"{host}:{port}")
    membership = EtcdMembership(etcd_url(settings.etcd), settings.etcd_prefix, me, settings.member_ttl_s,
                                settings.queue_map)
    await membership.start()
    return membership
