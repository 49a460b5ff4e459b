"""Issue 35's identity rules, as tables: tcl-gm's plaintext --listen only on loopback unless
--insecure; the GM's Submit/Get/Cancel rules over authenticated callers; the bearer header;
a GM certificate bound to the index it was issued for (master/identity/gmguard.py)."""

from __future__ import annotations

import pytest

from tcluster.daemonkit.configfile import ConfigError
from tcluster.domain.errors import PermissionDenied
from tcluster.gm.auth import bearer, may_submit, may_touch
from tcluster.gm.settings import settings_from
from tcluster.master.identity.gmguard import GMGuard
from tcluster.security.authz import ANONYMOUS, Caller
from tcluster.security.gmcert import GM_INDEX_LABEL

BASE = dict(name="gm0", index=0, lms="lm0=h:1")


@pytest.mark.parametrize("listen, extra, ok", [
    ("127.0.0.1:7080", {}, True),
    ("localhost:7080", {}, True),
    ("[::1]:7080", {}, True),
    ("0.0.0.0:7080", {}, False),
    ("10.1.2.3:7080", {}, False),
    ("gm.example:7080", {}, False),
    ("0.0.0.0:7080", {"insecure": True}, True),
    ("0.0.0.0:7080", {"tls_cert": "/c", "tls_key": "/k"}, True),
])
def test_plaintext_listen_only_on_loopback_unless_insecure(listen: str, extra: dict, ok: bool) -> None:
    values = {**BASE, "listen": listen, **extra}
    if ok:
        assert settings_from(values).listen == listen
    else:
        with pytest.raises(ConfigError, match="--listen: .* not a loopback address .* --insecure"):
            settings_from(values)


ALICE = Caller("alice", False, "alice", ("a", "eng.*"))
BOB = Caller("bob", False, "bob", ("a",))
ADMIN = Caller("root", True, "", ("*",))


@pytest.mark.parametrize("caller, queue, run_as, allowed", [
    (ALICE, "a", "", True),
    (ALICE, "eng.ml", "", True),
    (ALICE, "b", "", False),                 # no grant
    (ALICE, "a", "alice", True),             # their own mapping
    (ALICE, "a", "root", False),             # only admins choose --user
    (ADMIN, "b", "root", True),
    (ANONYMOUS, "b", "root", True),          # an insecure GM: everyone is an admin
])
def test_submit_needs_a_grant_and_only_admins_choose_the_user(caller: Caller, queue: str, run_as: str,
                                                              allowed: bool) -> None:
    assert may_submit(caller, queue, run_as, 1.0).allowed is allowed


@pytest.mark.parametrize("caller, owner, allowed", [
    (ALICE, "alice", True), (BOB, "alice", False), (ADMIN, "alice", True), (BOB, "", False),
])
def test_get_and_cancel_are_the_owners_or_an_admins(caller: Caller, owner: str, allowed: bool) -> None:
    assert may_touch(caller, owner) is allowed


@pytest.mark.parametrize("metadata, token", [
    ((("authorization", "Bearer tcu.x.y"),), "tcu.x.y"),
    ((("Authorization", b"bearer  tcu.x.y "),), "tcu.x.y"),
    ((("authorization", "Basic abc"),), ""),
    ((), ""),
    (None, ""),
])
def test_bearer_token_of_the_metadata(metadata: object, token: str) -> None:
    assert bearer(metadata) == token  # type: ignore[arg-type]


class _Certs:
    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels

    def cert_status(self, serial: str) -> tuple[str, dict[str, str]] | None:
        return ("gm:gm0", self.labels) if serial == "s1" else None


@pytest.mark.parametrize("labels, index, allowed", [
    ({GM_INDEX_LABEL: "0"}, 0, True),
    ({GM_INDEX_LABEL: "0"}, 1, False),       # GM 0's certificate acting as GM 1
    ({GM_INDEX_LABEL: "1"}, 1, True),
    ({}, 0, False),                          # issued before indexes were recorded: issue it again
    ({GM_INDEX_LABEL: "1"}, None, True),     # GMAuthenticate names no index
])
def test_a_gm_certificate_acts_only_as_its_index(labels: dict[str, str], index: int | None, allowed: bool) -> None:
    guard = GMGuard(_Certs(labels))  # type: ignore[arg-type]
    if allowed:
        guard.check_live("gm0", "s1", "Place", index)
    else:
        with pytest.raises(PermissionDenied, match="bound to GM index"):
            guard.check_live("gm0", "s1", "Place", index)
