"""A thin asyncio façade over etcd v3's gRPC API: get, prefix range, transactions,
leases and a prefix watch, over several endpoints.

It uses the generated stubs that ship with `aetcd` and its own channels, one per
endpoint, so that a dead, paused or partitioned member costs one timeout and the next
call goes to the next member. etcd's own errors stay here: callers see `EtcdUnavailable`
(no member answered), `EtcdRefused` (a transaction etcd will never accept) and
`Compacted` (a watch started before the compaction point)."""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import AsyncIterator, Awaitable, Callable, TypeVar

import grpc
from aetcd.rpc import rpc_pb2 as pb
from aetcd.rpc import rpc_pb2_grpc as stubs

from tcluster.domain.errors import Unavailable
from tcluster.etcd.tls import EtcdTLS

log = logging.getLogger(__name__)
T = TypeVar("T")
# Ask the member to fail a call (or cancel a watch) when it has no raft leader, rather
# than serve from a minority side of a partition (clientv3's WithRequireLeader).
_REQUIRE_LEADER = (("hasleader", "true"),)
_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
              grpc.StatusCode.UNKNOWN}
_CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 2_000),       # a paused member breaks its streams within seconds
    ("grpc.keepalive_timeout_ms", 2_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 64 * 2**20),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1_000),
]
RANGE_PAGE = 2_000
_TLS_FAILURE = re.compile(r"handshake|ssl|tsi_|certificate", re.IGNORECASE)


class EtcdUnavailable(Unavailable):
    """No etcd member answered (quorum lost, or every endpoint down)."""


class EtcdRefused(Exception):
    """etcd answered a transaction with an error of its own (request too large, too many
    operations, a duplicate key): refused as a whole before it was applied, and refused
    again if sent again."""


class Compacted(Exception):
    def __init__(self, revision: int) -> None:
        super().__init__(f"revision compacted up to {revision}")
        self.revision = revision


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int = 0


@dataclass(frozen=True)
class WatchEvent:
    key: str
    value: bytes | None          # None: deleted
    mod_revision: int


def prefix_end(prefix: str) -> bytes:
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return bytes(raw)


def _kv(kv: pb.KeyValue) -> KeyValue:
    return KeyValue(kv.key.decode(), kv.value, kv.create_revision, kv.mod_revision, kv.lease)


# ---- transaction parts (values, built by the caller) ----

def put(key: str, value: bytes, lease: int = 0) -> pb.RequestOp:
    return pb.RequestOp(request_put=pb.PutRequest(key=key.encode(), value=value, lease=lease))


def delete(key: str) -> pb.RequestOp:
    return pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=key.encode()))


def delete_prefix(prefix: str) -> pb.RequestOp:
    return pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=prefix.encode(), range_end=prefix_end(prefix)))


def get_op(key: str) -> pb.RequestOp:
    return pb.RequestOp(request_range=pb.RangeRequest(key=key.encode()))


def create_revision_is(key: str, revision: int) -> pb.Compare:
    """revision 0: the key does not exist."""
    return pb.Compare(result=pb.Compare.EQUAL, target=pb.Compare.CREATE, key=key.encode(), create_revision=revision)


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    revision: int
    ranges: list[list[KeyValue]]     # the range responses, in order


class EtcdKV:
    def __init__(self, endpoints: list[str], timeout_s: float = 2.0, tls: EtcdTLS | None = None) -> None:
        self.endpoints = endpoints
        self.timeout_s = timeout_s
        self.tls = tls
        if tls is None:
            self._channels = [grpc.aio.insecure_channel(e, options=_CHANNEL_OPTIONS) for e in endpoints]
        else:
            credentials = tls.credentials()
            self._channels = [grpc.aio.secure_channel(e, credentials, options=_CHANNEL_OPTIONS) for e in endpoints]
        self._current = 0

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()

    def _rotate(self, failed: int) -> None:
        if self._current == failed:
            self._current = (failed + 1) % len(self._channels)

    async def _call(self, what: str, fn: Callable[[grpc.aio.Channel], Awaitable[T]]) -> T:
        """Tries each member once, starting with the one that answered last."""
        last = ""
        for _ in range(len(self._channels)):
            index = self._current
            try:
                return await fn(self._channels[index])
            except grpc.aio.AioRpcError as error:
                if error.code() not in _RETRYABLE:
                    raise
                last = f"{self.endpoints[index]}: {error.details() or error.code().name}"
                self._rotate(index)
        raise EtcdUnavailable(f"etcd did not answer {what} ({last}); {self._hint(last)}")

    def _hint(self, last: str) -> str:
        """What to check, from the last member's error: TLS settings, or the quorum."""
        if _TLS_FAILURE.search(last.partition(": ")[2]):     # the error, not the endpoint's name
            return ("the TLS handshake failed: check the store URL's cacert (the CA of the members' certificates) "
                    "and cert/key (required by etcd's --client-cert-auth)")
        if not self.tls and "socket closed" in last.lower():
            return (f"is a quorum of {','.join(self.endpoints)} up? (an etcd that speaks TLS closes plaintext "
                    "connections: add ?cacert=PATH[&cert=PATH&key=PATH] to the store URL)")
        return f"is a quorum of {','.join(self.endpoints)} up?"

    # ---- KV ----

    async def get(self, key: str) -> KeyValue | None:
        async def call(channel: grpc.aio.Channel) -> KeyValue | None:
            reply = await stubs.KVStub(channel).Range(pb.RangeRequest(key=key.encode()), timeout=self.timeout_s,
                                                      metadata=_REQUIRE_LEADER)
            return _kv(reply.kvs[0]) if reply.kvs else None
        return await self._call(f"get {key}", call)

    async def range_prefix(self, prefix: str, revision: int = 0) -> tuple[list[KeyValue], int]:
        """Every key under prefix at one revision (paged), and that revision."""
        out: list[KeyValue] = []
        start, end = prefix.encode(), prefix_end(prefix)
        while True:
            async def call(channel: grpc.aio.Channel) -> pb.RangeResponse:
                return await stubs.KVStub(channel).Range(
                    pb.RangeRequest(key=start, range_end=end, limit=RANGE_PAGE, revision=revision),
                    timeout=self.timeout_s * 4, metadata=_REQUIRE_LEADER)
            reply = await self._call(f"range {prefix}", call)
            revision = revision or reply.header.revision
            out += [_kv(kv) for kv in reply.kvs]
            if not reply.more or not reply.kvs:
                return out, revision
            start = reply.kvs[-1].key + b"\0"

    async def txn(self, compare: list[pb.Compare], success: list[pb.RequestOp],
                  failure: list[pb.RequestOp] | None = None) -> TxnResult:
        request = pb.TxnRequest(compare=compare, success=success, failure=failure or [])

        async def call(channel: grpc.aio.Channel) -> pb.TxnResponse:
            return await stubs.KVStub(channel).Txn(request, timeout=self.timeout_s, metadata=_REQUIRE_LEADER)
        try:
            reply = await self._call("a transaction", call)
        except grpc.aio.AioRpcError as error:     # not retryable (_call retries the rest): nothing was applied
            raise EtcdRefused(f"etcd refused the transaction: {(error.details() or error.code().name)[:200]}") from None
        ranges = [[_kv(kv) for kv in r.response_range.kvs] for r in reply.responses
                  if r.WhichOneof("response") == "response_range"]
        return TxnResult(reply.succeeded, reply.header.revision, ranges)

    async def compact(self, revision: int) -> None:
        """Forgets the history before `revision` (etcd keeps every revision until told)."""
        async def call(channel: grpc.aio.Channel) -> None:
            await stubs.KVStub(channel).Compact(pb.CompactionRequest(revision=revision), timeout=self.timeout_s * 4,
                                                metadata=_REQUIRE_LEADER)
        await self._call("a compaction", call)

    # ---- leases ----

    async def grant(self, ttl_s: int) -> int:
        async def call(channel: grpc.aio.Channel) -> int:
            reply = await stubs.LeaseStub(channel).LeaseGrant(pb.LeaseGrantRequest(TTL=ttl_s), timeout=self.timeout_s,
                                                              metadata=_REQUIRE_LEADER)
            return int(reply.ID)
        return await self._call("a lease grant", call)

    async def keepalive(self, lease: int) -> int:
        """Renews the lease once; its remaining TTL in seconds (0 or less: it has expired)."""
        async def call(channel: grpc.aio.Channel) -> int:
            stream = stubs.LeaseStub(channel).LeaseKeepAlive(iter([pb.LeaseKeepAliveRequest(ID=lease)]),
                                                             timeout=self.timeout_s, metadata=_REQUIRE_LEADER)
            async for reply in stream:
                return int(reply.TTL)
            return 0
        return await self._call("a lease keepalive", call)

    async def revoke(self, lease: int) -> None:
        """Ends the lease and its keys now. A lease etcd no longer knows (it expired while
        this process was stopped or partitioned) is already what a revoke asks for: etcd's
        NOT_FOUND is not an error here, so a stop that revokes goes on to close the rest."""
        async def call(channel: grpc.aio.Channel) -> None:
            try:
                await stubs.LeaseStub(channel).LeaseRevoke(pb.LeaseRevokeRequest(ID=lease), timeout=self.timeout_s,
                                                           metadata=_REQUIRE_LEADER)
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.NOT_FOUND:
                    raise
        await self._call("a lease revoke", call)

    # ---- watch ----

    async def watch(self, prefix: str, start_revision: int) -> AsyncIterator[tuple[int, list[WatchEvent]]]:
        """(revision, events) batches for keys under prefix from start_revision on, across
        member failures (resumed from the last revision seen); Compacted if too old."""
        next_revision = start_revision
        failures = 0
        while True:
            index = self._current
            try:
                async for revision, events in self._watch_once(index, prefix, next_revision):
                    failures = 0
                    # A batch without events is a progress report: everything up to it was sent.
                    next_revision = max(next_revision, (events[-1].mod_revision if events else revision) + 1)
                    yield revision, events
            except grpc.aio.AioRpcError as error:
                log.info("etcd watch on %s broke (%s); resuming on the next member", self.endpoints[index],
                         error.details() or error.code().name)
            self._rotate(index)
            failures += 1
            await asyncio.sleep(min(1.0, 0.05 * failures))

    async def _watch_once(self, index: int, prefix: str, start: int) -> AsyncIterator[tuple[int, list[WatchEvent]]]:
        create = pb.WatchRequest(create_request=pb.WatchCreateRequest(
            key=prefix.encode(), range_end=prefix_end(prefix), start_revision=start, progress_notify=True))
        requests: asyncio.Queue[object] = asyncio.Queue()
        requests.put_nowait(create)

        async def outgoing() -> AsyncIterator[object]:
            while True:
                yield await requests.get()
        call = stubs.WatchStub(self._channels[index]).Watch(outgoing(), metadata=_REQUIRE_LEADER)
        try:
            async for reply in call:
                if reply.compact_revision:
                    raise Compacted(reply.compact_revision)
                if reply.created:       # its header is the current revision, not progress
                    continue
                if reply.canceled:
                    log.info("etcd cancelled the watch: %s", reply.cancel_reason or "no reason given")
                    return
                events = [WatchEvent(e.kv.key.decode(), e.kv.value if e.type == 0 else None, e.kv.mod_revision)
                          for e in reply.events]
                yield reply.header.revision, events
        finally:
            call.cancel()
