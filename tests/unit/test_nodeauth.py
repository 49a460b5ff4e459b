"""Join tokens and node certificates in auth.db: checks with an injected `now`, single use,
hashes only, revocation, and the guard's decisions on agent streams."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tcluster.domain.errors import FailedPrecondition, InvalidArgument, PermissionDenied, Unauthenticated
from tcluster.master.core.actions import Registration
from tcluster.master.identity.joining import NodeGuard, NodeJoin, PeerCert
from tcluster.master.links import AgentLink
from tcluster.master.identity.nodeauth import AUTH_DB, NodeAuth, TokenRow, check_token, hash_secret
from tcluster.domain.resources import Resources
from tcluster.security import nodekeys, pki
from tcluster.security.jointoken import JoinTokenText, parse_join_token

NOW = 1_800_000_000.0


def _row(used_at: float | None = None, expires_at: float = NOW + 60) -> TokenRow:
    return TokenRow("abcdef012345", hash_secret("s" * 43), expires_at, {}, used_at, "n1" if used_at else None)


@pytest.mark.parametrize("row, secret, now, message", [
    (None, "s" * 43, NOW, "unknown join token"),
    (_row(), "t" * 43, NOW, "wrong secret"),
    (_row(used_at=NOW - 1), "s" * 43, NOW, r"already used \(by node n1\)"),
    (_row(), "s" * 43, NOW + 60, "expired at"),          # the expiry instant itself is too late
    (_row(), "s" * 43, NOW + 3600, "expired at"),
])
def test_check_token_refusals(row: TokenRow | None, secret: str, now: float, message: str) -> None:
    with pytest.raises(Unauthenticated, match=message):
        check_token(row, secret, now)


def test_check_token_accepts_a_fresh_token_until_just_before_expiry() -> None:
    check_token(_row(), "s" * 43, NOW)
    check_token(_row(), "s" * 43, NOW + 59.999)


@pytest.mark.parametrize("text, message", [
    ("", "tcl1.<CA sha256>"),
    ("tcl2.aa.bb.cc", "tcl1.<CA sha256>"),
    ("tcl1.abcd.0123456789ab." + "s" * 43, "64 hex"),
    ("tcl1." + "a" * 64 + ".XYZ." + "s" * 43, "malformed"),
    ("tcl1." + "a" * 64 + ".0123456789ab.short", "malformed"),
])
def test_parse_join_token_refusals(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_join_token(text)


def test_token_text_round_trips_and_its_repr_hides_the_secret() -> None:
    token = JoinTokenText("sha256:" + "a" * 64, "0123456789ab", "s" * 43)
    assert parse_join_token(str(token)) == token
    assert "s" * 43 not in repr(token)


def test_tokens_are_stored_hashed_single_use_and_keep_their_labels(tmp_path: Path) -> None:
    auth = NodeAuth(tmp_path)
    token_id, secret = auth.create_token(60, {"rack": "r1"}, NOW)
    raw = (tmp_path / AUTH_DB).read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("auth.db-wal"))
    assert secret.encode() not in raw and hash_secret(secret).encode() in raw
    token = JoinTokenText("sha256:" + "a" * 64, token_id, secret)
    assert auth.consume(token, "n1", NOW + 1) == {"rack": "r1"}
    with pytest.raises(Unauthenticated, match="already used"):
        auth.consume(token, "n2", NOW + 2)
    expiring_id, expiring_secret = auth.create_token(60, {}, NOW)
    with pytest.raises(Unauthenticated, match="expired"):
        auth.consume(JoinTokenText(token.fingerprint, expiring_id, expiring_secret), "n3", NOW + 61)
    with pytest.raises(InvalidArgument, match="--ttl"):
        auth.create_token(8 * 86400, {}, NOW)
    auth.close()


def test_a_join_that_fails_half_way_leaves_the_token_unspent_and_no_certificate(tmp_path: Path) -> None:
    auth = NodeAuth(tmp_path)
    token_id, secret = auth.create_token(60, {}, NOW)
    token = JoinTokenText("sha256:" + "a" * 64, token_id, secret)
    other_id, other_secret = auth.create_token(60, {}, NOW)
    assert auth.admit(JoinTokenText(token.fingerprint, other_id, other_secret), "n0", "serial-1", NOW) == {}
    # the certificate write fails after the token was marked used (here: a serial already on record)
    with pytest.raises(sqlite3.IntegrityError):
        auth.admit(token, "n1", "serial-1", NOW)
    assert auth.token(token_id).used_at is None                 # type: ignore[union-attr]
    assert auth.db.execute("SELECT count(*) FROM node_certs WHERE node = 'n1'").fetchone()[0] == 0
    assert auth.admit(token, "n1", "serial-2", NOW) == {}       # the same token joins once it can
    auth.close()


def test_a_second_connection_sees_a_consumed_token_at_once(tmp_path: Path) -> None:
    first, second = NodeAuth(tmp_path), NodeAuth(tmp_path)
    token_id, secret = first.create_token(60, {}, NOW)
    token = JoinTokenText("sha256:" + "a" * 64, token_id, secret)
    first.consume(token, "n1", NOW)
    with pytest.raises(Unauthenticated, match="already used"):
        second.consume(token, "n2", NOW)
    first.close()
    second.close()


@pytest.fixture()
def master(tmp_path: Path) -> pki.MasterPki:
    return pki.init_pki(tmp_path, [])


def _join(master: pki.MasterPki, auth: NodeAuth, node: str, labels: dict[str, str] | None = None) -> PeerCert:
    token_id, secret = auth.create_token(60, labels or {}, NOW)
    key, csr = nodekeys.make_node_csr(node)
    result = NodeJoin(master, auth, 7071, clock=lambda: NOW).join(
        str(JoinTokenText(master.fingerprint, token_id, secret)), node, csr)
    return PeerCert(f"node:{node}", result.cert_pem)


def _reg(node: str, labels: dict[str, str] | None = None) -> Registration:
    return Registration(node, Resources(1, 2**30), Resources(0, 0), tuple(sorted((labels or {}).items())), "fake", ())


def test_guard_binds_the_name_applies_token_labels_and_cuts_revoked_links(tmp_path: Path,
                                                                          master: pki.MasterPki) -> None:
    auth = NodeAuth(tmp_path)
    guard = NodeGuard(auth)
    peer = _join(master, auth, "n1", {"rack": "r1"})
    with pytest.raises(Unauthenticated, match="needs a node certificate"):
        guard.admit(None, _reg("n1"))
    with pytest.raises(PermissionDenied, match="node n1's; it cannot register as 'n2'"):
        guard.admit(peer, _reg("n2"))
    admitted, serial = guard.admit(peer, _reg("n1", {"rack": "fake", "disk": "ssd"}))
    assert dict(admitted.labels) == {"rack": "r1", "disk": "ssd"}     # the token's labels win
    link = AgentLink("n1")
    guard.track(link, serial)
    assert guard.sweep() == []
    with pytest.raises(FailedPrecondition, match="already holds a certificate"):
        _join(master, auth, "n1")
    assert NodeAuth(tmp_path).revoke_node("n1", NOW + 5) == 1          # as the offline command does
    assert guard.sweep() == [link] and link.closed
    assert guard.forget(link) is True
    with pytest.raises(PermissionDenied, match="revoked"):
        guard.admit(peer, _reg("n1"))
    fresh = _join(master, auth, "n1")                                    # joins again after revocation
    assert guard.admit(fresh, _reg("n1"))[1] != serial


def test_guard_refuses_a_certificate_this_master_never_recorded(tmp_path: Path, master: pki.MasterPki) -> None:
    _, csr = nodekeys.make_node_csr("n1")
    stray = pki.issue_node_cert(master, csr, "n1")   # signed by the CA, but not through a join
    with pytest.raises(PermissionDenied, match="revoked or is unknown"):
        NodeGuard(NodeAuth(tmp_path)).admit(PeerCert("node:n1", stray), _reg("n1"))
    with pytest.raises(PermissionDenied, match="not a node certificate"):
        NodeGuard(NodeAuth(tmp_path)).admit(PeerCert("master.tcluster", master.cert_chain_pem), _reg("n1"))


def test_auth_db_is_private(tmp_path: Path) -> None:
    NodeAuth(tmp_path).close()
    assert (tmp_path / AUTH_DB).stat().st_mode & 0o077 == 0
    assert sqlite3.connect(tmp_path / AUTH_DB).execute("PRAGMA journal_mode").fetchone() == ("wal",)
