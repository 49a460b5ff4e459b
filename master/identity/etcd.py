"""The identity store of highly available masters: keys under P/auth/ in etcd.

| key | value (JSON) |
|---|---|
| `P/auth/users/<name>` | the user, with `token_hash` (sha256 of the token's secret) |
| `P/auth/tokens/<id>` | a join token: `secret_hash`, expiry, labels, `used_at`/`used_by` |
| `P/auth/certs/<serial>` | a node certificate: node, labels, token, `revoked_at` |
| `P/auth/nodes/<node>` | `{"serial"}`: the node's one live certificate |

`P/auth/nodes/` is an index that makes "one live certificate per name" a single key to
compare, rather than a scan of every certificate.

Writes: read the keys involved at one revision, decide (the same pure checks as SQLite),
then one transaction that applies only if none of those keys changed since (compares on
their mod_revision; 0 means "still absent"); retried from the read when one did. So two
joins racing for one token: both read it unused, one transaction wins, the other re-reads
it used and is refused. Writes go through an EtcdBridge (a thread with its own loop).

Reads: from the master's Mirror when it has one (in memory, current to within the watch's
lag, and our own writes are applied to it at once), else through the bridge (offline
commands). With a mirror, call the store on the mirror's loop thread (the master's, where
its servicers run): a committed write is applied to the mirror from the calling thread."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Awaitable, Callable, Generic, TypeVar

from aetcd.rpc import rpc_pb2 as pb

from tcluster.domain.errors import FailedPrecondition, Unavailable
from tcluster.master.identity.records import (TokenRow, User, check_token, match_digest, name_taken, new_join_token,
                                       user_exists)
from tcluster.master.store.etcdbridge import EtcdBridge
from tcluster.etcd.kv import EtcdKV, KeyValue, delete, get_op, put
from tcluster.etcd.mirror import Mirror
from tcluster.security.jointoken import JoinTokenText

T = TypeVar("T")
ATTEMPTS = 20     # compare failures in a row before giving up: only under a storm of writes to one key


def mod_revision_is(key: str, revision: int) -> pb.Compare:
    """revision 0: the key does not exist (etcd compares a missing key's revisions as 0)."""
    return pb.Compare(result=pb.Compare.EQUAL, target=pb.Compare.MOD, key=key.encode(), mod_revision=revision)


def _dumps(record: dict[str, object]) -> bytes:
    return json.dumps(record, sort_keys=True).encode()


def user_record(user: User, digest: str) -> bytes:
    return _dumps({"name": user.name, "token_hash": digest, "unix_user": user.unix_user,
                   "queues": list(user.grants), "admin": user.admin, "created_at": user.created_at})


def _user(value: bytes) -> tuple[str, User]:
    r = json.loads(value)
    return r["token_hash"], User(r["name"], r["unix_user"], tuple(r["queues"]), bool(r["admin"]), r["created_at"])


def _token(value: bytes) -> TokenRow:
    r = json.loads(value)
    return TokenRow(r["id"], r["secret_hash"], r["expires_at"], r["labels"], r["used_at"], r["used_by"])


def _token_record(row: TokenRow, created_at: float) -> bytes:
    return _dumps({"id": row.token_id, "secret_hash": row.secret_hash, "created_at": created_at,
                   "expires_at": row.expires_at, "labels": row.labels, "used_at": row.used_at,
                   "used_by": row.used_by})


def _spent(value: bytes, node: str, now: float) -> bytes:
    record = json.loads(value)
    record.update(used_at=now, used_by=node)
    return _dumps(record)


def _revoked_at(value: bytes) -> float | None:
    revoked_at: float | None = json.loads(value)["revoked_at"]
    return revoked_at


class ParsedByValue(Generic[T]):
    """Parsed records, remembered by their stored bytes: a lookup on every RPC reads the
    mirror's current values (so it is never stale, also after the mirror reloads) but
    parses only the values it has not seen yet."""

    def __init__(self, parse: Callable[[bytes], T]) -> None:
        self._parse = parse
        self._seen: dict[bytes, T] = {}

    def parse(self, items: list[tuple[str, bytes]]) -> dict[str, T]:
        if len(self._seen) > 2 * len(items) + 64:      # forget the values of removed or changed keys
            self._seen = {}
        out: dict[str, T] = {}
        for key, value in items:
            if value not in self._seen:
                self._seen[value] = self._parse(value)
            out[key] = self._seen[value]
        return out


@dataclass(frozen=True)
class Plan(Generic[T]):
    """What a write read (key -> what it saw, None: absent), what it writes, what it returns."""

    seen: dict[str, KeyValue | None]
    writes: list[tuple[str, bytes | None]]      # (relative key, value or None: delete)
    result: T


class EtcdAuthStore:
    """AuthStore over etcd. `prefix` is the cluster's (e.g. /tcluster), keys go under P/auth/."""

    def __init__(self, bridge: EtcdBridge, prefix: str, mirror: Mirror | None = None,
                 owns_bridge: bool = False) -> None:
        self.bridge, self.prefix, self.mirror = bridge, prefix.rstrip("/"), mirror
        self._owns_bridge = owns_bridge
        self._users = ParsedByValue(_user)
        self._certs = ParsedByValue(_revoked_at)

    def close(self) -> None:
        if self._owns_bridge:
            self.bridge.close()

    # ---- reads ----

    def _key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}"

    def _get(self, relative: str) -> bytes | None:
        if self.mirror is not None:
            return self.mirror.get(relative)
        found = self.bridge.call(lambda kv: kv.get(self._key(relative)))
        return found.value if found is not None else None

    def _items(self, table: str) -> list[tuple[str, bytes]]:
        """(relative key, value) of one table ('auth/users'), in key order."""
        if self.mirror is not None:
            return self.mirror.items(table)
        kvs, _ = self.bridge.call(lambda kv: kv.range_prefix(self._key(table) + "/"))
        return [(kv.key[len(self.prefix) + 1:], kv.value) for kv in kvs]

    async def _read(self, kv: EtcdKV, *relative: str) -> dict[str, KeyValue | None]:
        """Several keys at one revision, in one round trip."""
        found = await kv.txn([], [get_op(self._key(key)) for key in relative])
        return {key: (kvs[0] if kvs else None) for key, kvs in zip(relative, found.ranges)}

    # ---- the write loop ----

    def _update(self, plan: Callable[[EtcdKV], Awaitable[Plan[T]]]) -> T:
        """Runs plan (reads and pure checks, which may raise), then commits its writes if
        nothing it read has changed since; from the top again if something has."""
        for _ in range(ATTEMPTS):
            outcome = self.bridge.call(lambda kv: self._attempt(kv, plan))
            if outcome is not None:
                made, revision = outcome
                self._applied(made.writes, revision)
                return made.result
        raise Unavailable("etcd: the identity records kept changing during this change; try again")

    async def _attempt(self, kv: EtcdKV, plan: Callable[[EtcdKV], Awaitable[Plan[T]]]) -> tuple[Plan[T], int] | None:
        made = await plan(kv)
        if not made.writes:
            return made, 0
        compares = [mod_revision_is(self._key(key), seen.mod_revision if seen is not None else 0)
                    for key, seen in made.seen.items()]
        ops = [put(self._key(key), value) if value is not None else delete(self._key(key))
               for key, value in made.writes]
        done = await kv.txn(compares, ops)
        return (made, done.revision) if done.succeeded else None

    def _applied(self, writes: list[tuple[str, bytes | None]], revision: int) -> None:
        """Our committed writes, into the mirror at once: a read right after sees them (the
        node that just joined connects within milliseconds, before the watch may bring it)."""
        if self.mirror is None or not writes:
            return
        for key, value in writes:
            self.mirror.apply(key, value, revision)

    # ---- users ----

    def add_user(self, user: User, token_digest: str) -> None:
        key = f"auth/users/{user.name}"

        async def plan(kv: EtcdKV) -> Plan[None]:
            seen = await self._read(kv, key)
            if seen[key] is not None:
                raise user_exists(user.name)
            return Plan(seen, [(key, user_record(user, token_digest))], None)
        self._update(plan)

    def list_users(self) -> list[User]:
        return [_user(value)[1] for _, value in self._items("auth/users")]

    def user_named(self, name: str) -> User | None:
        value = self._get(f"auth/users/{name}") if "/" not in name else None
        return _user(value)[1] if value is not None else None

    def remove_user(self, name: str) -> bool:
        key = f"auth/users/{name}"

        async def plan(kv: EtcdKV) -> Plan[bool]:
            seen = await self._read(kv, key)
            return Plan(seen, [(key, None)] if seen[key] is not None else [], seen[key] is not None)
        return self._update(plan)

    def user_by_digest(self, digest: str) -> User | None:
        return match_digest(self._users.parse(self._items("auth/users")).values(), digest)

    # ---- join tokens ----

    def create_token(self, ttl_s: float, labels: dict[str, str], now: float) -> tuple[str, str]:
        new = new_join_token(ttl_s, labels, now)
        key = f"auth/tokens/{new.row.token_id}"

        async def plan(kv: EtcdKV) -> Plan[None]:
            seen = await self._read(kv, key)
            if seen[key] is not None:        # 48 random bits collided: vanishingly rare, never overwrite
                raise Unavailable("a join token id collided; try again")
            return Plan(seen, [(key, _token_record(new.row, new.created_at))], None)
        self._update(plan)
        return new.row.token_id, new.secret

    def token(self, token_id: str) -> TokenRow | None:
        value = self._get(f"auth/tokens/{token_id}")
        return _token(value) if value is not None else None

    def consume(self, token: JoinTokenText, node: str, now: float) -> dict[str, str]:
        key = f"auth/tokens/{token.token_id}"

        async def plan(kv: EtcdKV) -> Plan[dict[str, str]]:
            seen = await self._read(kv, key)
            found = seen[key]
            check_token(_token(found.value) if found is not None else None, token.secret, now)
            assert found is not None
            return Plan(seen, [(key, _spent(found.value, node, now))], _token(found.value).labels)
        return self._update(plan)

    # ---- node certificates ----

    def check_name_free(self, node: str) -> None:
        index = self._get(f"auth/nodes/{node}")
        if index is not None:
            raise name_taken(node, json.loads(index)["serial"])

    def admit(self, token: JoinTokenText, node: str, serial: str, now: float) -> dict[str, str]:
        token_key, node_key, cert_key = f"auth/tokens/{token.token_id}", f"auth/nodes/{node}", f"auth/certs/{serial}"

        async def plan(kv: EtcdKV) -> Plan[dict[str, str]]:
            seen = await self._read(kv, node_key, token_key, cert_key)
            _check_free(node, seen[node_key], seen[cert_key], serial)
            found = seen[token_key]
            check_token(_token(found.value) if found is not None else None, token.secret, now)
            assert found is not None
            labels = _token(found.value).labels
            writes = [(token_key, _spent(found.value, node, now)),
                      *_cert_writes(serial, node, token.token_id, labels, now)]
            return Plan(seen, writes, labels)
        return self._update(plan)

    def record_cert(self, serial: str, node: str, token_id: str, labels: dict[str, str], now: float) -> None:
        node_key, cert_key = f"auth/nodes/{node}", f"auth/certs/{serial}"

        async def plan(kv: EtcdKV) -> Plan[None]:
            seen = await self._read(kv, node_key, cert_key)
            _check_free(node, seen[node_key], seen[cert_key], serial)
            return Plan(seen, _cert_writes(serial, node, token_id, labels, now), None)
        self._update(plan)

    def cert_status(self, serial: str) -> tuple[str, dict[str, str]] | None:
        value = self._get(f"auth/certs/{serial}")
        if value is None:
            return None
        record = json.loads(value)
        return None if record["revoked_at"] is not None else (record["node"], record["labels"])

    def revoke_node(self, node: str, now: float) -> int:
        node_key = f"auth/nodes/{node}"

        async def plan(kv: EtcdKV) -> Plan[int]:
            index = (await self._read(kv, node_key))[node_key]
            if index is None:
                return Plan({}, [], 0)
            cert_key = f"auth/certs/{json.loads(index.value)['serial']}"
            cert = (await self._read(kv, cert_key))[cert_key]
            writes: list[tuple[str, bytes | None]] = [(node_key, None)]
            if cert is not None:
                record = json.loads(cert.value)
                record["revoked_at"] = now
                writes.append((cert_key, _dumps(record)))
            return Plan({node_key: index, cert_key: cert}, writes, 1 if cert is not None else 0)
        return self._update(plan)

    def revoked_serials(self) -> set[str]:
        return {key.rsplit("/", 1)[1] for key, revoked in self._certs.parse(self._items("auth/certs")).items()
                if revoked is not None}


def _check_free(node: str, index: KeyValue | None, cert: KeyValue | None, serial: str) -> None:
    if index is not None:
        raise name_taken(node, json.loads(index.value)["serial"])
    if cert is not None:     # SQLite's primary key refuses this too: a serial is recorded once
        raise FailedPrecondition(f"certificate serial {serial} is already on record")


def _cert_writes(serial: str, node: str, token_id: str, labels: dict[str, str],
                 now: float) -> list[tuple[str, bytes | None]]:
    record = {"serial": serial, "node": node, "issued_at": now, "token_id": token_id, "labels": labels,
              "revoked_at": None}
    return [(f"auth/certs/{serial}", _dumps(record)), (f"auth/nodes/{node}", _dumps({"serial": serial}))]
