"""The identity store's behaviour, the same for both implementations: SQLite (auth.db) and
etcd (a real single-member etcd on loopback). Each etcd test has a prefix of its own."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tcluster.domain.errors import FailedPrecondition, InvalidArgument, Unauthenticated
from tcluster.master.identity.records import AuthStore
from tcluster.master.identity.choice import init_identity, load_pki, open_auth_store, parse_store
from tcluster.master.identity.accounts import create_user
from tcluster.master.identity.users import UserDirectory
from tcluster.security import certs, pki
from tcluster.security.jointoken import JoinTokenText
from testkit.etcd_single import SingleEtcd, single_etcd  # noqa: F401 - a fixture

NOW = 1_800_000_000.0
FP = "sha256:" + "a" * 64
Opener = Callable[[], AuthStore]


@pytest.fixture(params=["sqlite", "etcd"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, Path]:
    """(store URL, prefix, data dir) of a fresh, empty identity store."""
    if request.param == "sqlite":
        return "", "/tcluster", tmp_path
    etcd: SingleEtcd = request.getfixturevalue("single_etcd")
    return etcd.url, f"/t-{uuid.uuid4().hex[:10]}", tmp_path


@pytest.fixture
def opener(where: tuple[str, str, Path]) -> Iterator[Opener]:
    """Opens independent stores on the same records (as two masters, or a master and a command)."""
    opened: list[AuthStore] = []

    def open_one() -> AuthStore:
        opened.append(open_auth_store(*where))
        return opened[-1]
    yield open_one
    for store in opened:
        store.close()


def _token(store: AuthStore, labels: dict[str, str] | None = None, ttl_s: float = 60) -> JoinTokenText:
    token_id, secret = store.create_token(ttl_s, labels or {}, NOW)
    return JoinTokenText(FP, token_id, secret)


def test_users_add_list_resolve_and_a_removed_user_is_refused(opener: Opener) -> None:
    store, other = opener(), opener()
    directory = UserDirectory(store)
    alice = create_user(store, "alice", "alice", ("ads.*",), False, "")
    assert directory.resolve(alice).name == "alice"
    bob = create_user(other, "bob", "bob", (), True, "")           # another process adds one: seen at once
    assert directory.resolve(bob).admin
    assert [u.name for u in store.list_users()] == ["alice", "bob"]
    found = store.user_named("alice")                               # one row or key: the GM's cert users
    assert found is not None and (found.name, found.grants, found.admin) == ("alice", ("ads.*",), False)
    assert store.user_named("carol") is None and store.user_named("a/../bob") is None
    with pytest.raises(InvalidArgument, match="user bob exists"):
        create_user(store, "bob", "bob", (), False, "")
    assert other.remove_user("alice") and not other.remove_user("alice")
    with pytest.raises(Unauthenticated, match="not known to this master"):
        directory.resolve(alice)
    assert directory.resolve(bob).name == "bob"


def test_join_tokens_are_single_use_expire_and_keep_their_labels(opener: Opener) -> None:
    store = opener()
    token = _token(store, {"rack": "r1"})
    assert store.token(token.token_id).labels == {"rack": "r1"}            # type: ignore[union-attr]
    assert store.consume(token, "n1", NOW + 1) == {"rack": "r1"}
    with pytest.raises(Unauthenticated, match=r"already used \(by node n1\)"):
        opener().consume(token, "n2", NOW + 2)
    with pytest.raises(Unauthenticated, match="expired"):
        store.consume(_token(store), "n3", NOW + 61)
    with pytest.raises(Unauthenticated, match="wrong secret"):
        store.consume(JoinTokenText(FP, _token(store).token_id, "x" * 43), "n4", NOW)
    with pytest.raises(InvalidArgument, match="--ttl"):
        store.create_token(8 * 86400, {}, NOW)


def test_admit_revoke_and_join_again(opener: Opener) -> None:
    store, offline = opener(), opener()
    assert store.admit(_token(store, {"gpu": "1"}), "n1", "s1", NOW) == {"gpu": "1"}
    assert store.cert_status("s1") == ("n1", {"gpu": "1"})
    with pytest.raises(FailedPrecondition, match="node n1 already holds a certificate"):
        store.check_name_free("n1")
    spare = _token(store)
    with pytest.raises(FailedPrecondition, match="already holds"):
        store.admit(spare, "n1", "s2", NOW)
    assert store.token(spare.token_id).used_at is None                    # type: ignore[union-attr]
    assert offline.revoke_node("n1", NOW + 5) == 1 and offline.revoke_node("n1", NOW + 6) == 0
    assert store.cert_status("s1") is None and store.revoked_serials() == {"s1"}
    store.check_name_free("n1")
    assert store.admit(spare, "n1", "s2", NOW) == {}
    assert store.cert_status("s2") == ("n1", {}) and store.revoked_serials() == {"s1"}


def test_a_failed_admit_spends_nothing(opener: Opener) -> None:
    store = opener()
    store.admit(_token(store), "n0", "serial-1", NOW)
    token = _token(store)
    with pytest.raises((sqlite3.IntegrityError, FailedPrecondition)):     # the serial is on record already
        store.admit(token, "n1", "serial-1", NOW)
    assert store.token(token.token_id).used_at is None                    # type: ignore[union-attr]
    assert store.cert_status("serial-1") == ("n0", {})
    assert store.admit(token, "n1", "serial-2", NOW) == {}


def test_two_racing_joins_spend_a_token_exactly_once(opener: Opener) -> None:
    token = _token(opener())
    stores = [opener(), opener()]
    start = threading.Barrier(2)
    outcomes: list[object] = [None, None]

    def join(index: int) -> None:
        start.wait()
        try:
            outcomes[index] = stores[index].admit(token, f"n{index}", f"serial-{index}", NOW)
        except Unauthenticated as error:
            outcomes[index] = error
    threads = [threading.Thread(target=join, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    won = [i for i, outcome in enumerate(outcomes) if outcome == {}]
    assert len(won) == 1, outcomes
    assert "already used" in str(outcomes[1 - won[0]])
    assert stores[0].token(token.token_id).used_by == f"n{won[0]}"        # type: ignore[union-attr]
    assert stores[0].cert_status(f"serial-{1 - won[0]}") is None


def test_init_makes_a_pki_that_round_trips_and_a_second_init_is_refused(where: tuple[str, str, Path]) -> None:
    choice = parse_store(*where)
    assert load_pki(*where) is None
    done = init_identity(choice, ["m1.example.org", "10.0.0.5"])
    loaded = load_pki(*where)
    assert loaded == done.pki
    names = pki.x509.load_pem_x509_certificate(loaded.cert_chain_pem).extensions.get_extension_for_class(
        pki.x509.SubjectAlternativeName).value.get_values_for_type(pki.x509.DNSName)
    assert names[0] == certs.MASTER_ROLE_NAME and "m1.example.org" in names
    assert pki.issued_by(loaded.cert_chain_pem, loaded.ca_pem)
    store = open_auth_store(*where)
    try:
        assert UserDirectory(store).resolve(done.admin_token).admin           # the first admin, pinned to the CA
        assert done.admin_token.split(".")[1] == loaded.fingerprint.removeprefix("sha256:")
    finally:
        store.close()
    with pytest.raises(FailedPrecondition, match=f"already exists.*{done.pki.fingerprint}"):
        init_identity(choice, [])
    assert load_pki(*where) == done.pki


def test_bad_store_flags_name_the_flag(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="--store: 'zk://x' is neither"):
        parse_store("zk://x", "/tcluster", tmp_path)
    with pytest.raises(InvalidArgument, match="--store: .*HOST:PORT"):
        parse_store("etcd://nohost", "/tcluster", tmp_path)
    with pytest.raises(InvalidArgument, match="--store-prefix"):
        parse_store("etcd://127.0.0.1:2379", "tcluster", tmp_path)
    assert parse_store("etcd://a:1,b:2", "/p/", tmp_path).prefix == "/p"


def test_the_masters_mirror_serves_reads_and_sees_other_writers(single_etcd: SingleEtcd) -> None:
    """As in the master: sync calls on the loop that feeds the mirror."""
    from tcluster.master.identity.etcd import EtcdAuthStore
    from tcluster.master.store.etcdbridge import EtcdBridge
    from tcluster.etcd.kv import EtcdKV
    from tcluster.etcd.mirror import Mirror
    prefix = f"/t-{uuid.uuid4().hex[:10]}"

    async def main() -> None:
        kv = EtcdKV([single_etcd.endpoint])
        mirror = Mirror(kv, prefix)
        await mirror.start()
        bridge = EtcdBridge([single_etcd.endpoint])
        master = EtcdAuthStore(bridge, prefix, mirror)
        offline = open_auth_store(single_etcd.url, prefix, Path("."))
        try:
            master.admit(_token(master, {"rack": "r2"}), "n1", "s1", NOW)
            assert master.cert_status("s1") == ("n1", {"rack": "r2"})    # our own write, before the watch brings it
            alice = create_user(offline, "alice", "alice", (), False, "")
            directory = UserDirectory(master)
            await _until(lambda: _known(directory, alice))
            offline.remove_user("alice")
            offline.revoke_node("n1", NOW + 1)
            await _until(lambda: not _known(directory, alice))
            await _until(lambda: master.revoked_serials() == {"s1"})
            assert master.cert_status("s1") is None
        finally:
            offline.close()
            bridge.close()
            await mirror.stop()
            await kv.close()
    asyncio.run(main())


def _known(directory: UserDirectory, token: str) -> bool:
    try:
        directory.resolve(token)
        return True
    except Unauthenticated:
        return False


async def _until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "the mirror did not catch up"
        await asyncio.sleep(0.02)


def test_the_pki_read_from_a_mirror_is_the_one_init_wrote(single_etcd: SingleEtcd) -> None:
    from tcluster.etcd.kv import EtcdKV
    from tcluster.etcd.mirror import Mirror
    from tcluster.master.identity.etcdpki import pki_in_mirror
    where = (single_etcd.url, f"/t-{uuid.uuid4().hex[:10]}", Path("."))

    async def from_mirror() -> pki.MasterPki | None:
        kv = EtcdKV([single_etcd.endpoint])
        mirror = Mirror(kv, where[1])
        await mirror.start()
        try:
            return pki_in_mirror(mirror, where[1])
        finally:
            await mirror.stop()
            await kv.close()
    assert asyncio.run(from_mirror()) is None
    done = init_identity(parse_store(*where), [])
    assert asyncio.run(from_mirror()) == done.pki == load_pki(*where)
