"""User tokens, the ACL table and the user directory (auth.db)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tcluster.domain.errors import InvalidArgument, Unauthenticated
from tcluster.master.identity.accounts import add_user, bootstrap_admin, list_users, parse_grants, remove_user
from tcluster.master.identity.users import UserDirectory
from tcluster.security.authz import (
    ANONYMOUS, CancelJob, Caller, ListJobs, Policy, ReadCluster, ReadJob, ReadLogs, SubmitJob, audit_line, decide,
    grants_queue, run_as,
)
from tcluster.security.tokens import hash_secret, matches, new_token, parse_token, token_hash

FP = "sha256:" + "ab" * 32
ALICE = Caller("alice", False, "alice", ("ads.*",))
BOB = Caller("bob", False, "bob", ("eng",))
ROOT = Caller("root", True, "", ("*",))


# ---- tokens ----

def test_a_token_pins_the_ca_and_only_its_secret_is_hashed() -> None:
    token = new_token(FP)
    parsed = parse_token(token)
    assert parsed.ca_fingerprint == FP
    assert token_hash(token) == hash_secret(parsed.secret)
    assert parsed.secret not in token_hash(token)
    assert matches(token, token_hash(token))
    assert matches(f"tcu..{parsed.secret}", token_hash(token))       # CA part stripped: same secret


def test_tokens_are_unique_and_do_not_match_each_other() -> None:
    a, b = new_token(), new_token()
    assert a != b and parse_token(a).ca_fingerprint == ""
    assert not matches(a, token_hash(b))


@pytest.mark.parametrize("bad", ["", "hello", "tcu.xyz.abc", "tcu.." + "a" * 10, "ghp_" + "a" * 40,
                                 "tcu." + "0" * 64 + "." + "a" * 42])
def test_malformed_tokens_are_refused_without_echo(bad: str) -> None:
    with pytest.raises(Unauthenticated) as error:
        parse_token(bad)
    assert (bad not in str(error.value)) or not bad
    assert not matches(bad, "0" * 64)


# ---- the ACL table ----

CASES = [
    # caller, action, allowed, words in the reason
    (ALICE, SubmitJob("ads.prod", "", 1, 1), True, ""),
    (ALICE, SubmitJob("ads.prod.deep", "", 1, 1), True, ""),
    (ALICE, SubmitJob("eng.ml", "", 1, 1), False, "user alice may not submit to queue eng.ml: their grants are ads.*"),
    (BOB, SubmitJob("eng.ml", "", 1, 1), True, ""),          # a plain path grants its subtree
    (BOB, SubmitJob("engine", "", 1, 1), False, "grants are eng"),
    (Caller("carol", False, "carol", ()), SubmitJob("default", "", 1, 1), False, "grants are none"),
    (ALICE, SubmitJob("ads.prod", "root", 1, 1), False, "may not run tasks as 'root': only admins"),
    (ALICE, SubmitJob("ads.prod", "daemon", 1, 1), False, "only admins may choose --user"),
    (ALICE, SubmitJob("ads.prod", "alice", 1, 1), True, ""),       # naming oneself is harmless
    (ALICE, SubmitJob("ads.prod", "", 2, 1), False, "weight 2 in queue ads.prod: its max_job_weight is 1"),
    (ALICE, SubmitJob("ads.prod", "", 2, 4), True, ""),
    (ROOT, SubmitJob("eng.ml", "root", 50, 1), True, "admin"),
    (ALICE, ReadJob("j1", "bob"), True, ""),
    (ALICE, ReadLogs("j1", "bob"), False, "user alice may not read the logs of job j1: it belongs to bob"),
    (ALICE, ReadLogs("j1", "alice"), True, ""),
    (ALICE, CancelJob("j1", "bob"), False, "user alice may not cancel job j1: it belongs to bob"),
    (ALICE, CancelJob("j1", "alice"), True, ""),
    (ROOT, CancelJob("j1", "bob"), True, ""),
    (ROOT, ReadLogs("j1", "bob"), True, ""),
    (ALICE, ListJobs("bob"), True, ""),
    (ALICE, ReadCluster("nodes"), True, ""),
    (ANONYMOUS, CancelJob("j1", "someone"), True, ""),             # insecure mode: today's behaviour
    (ALICE, object(), False, "no rule allows object"),              # default deny
    (ROOT, object(), False, "no rule allows"),
]


@pytest.mark.parametrize("caller, action, allowed, why", CASES)
def test_acl_table(caller: Caller, action: object, allowed: bool, why: str) -> None:
    decision = decide(caller, action, Policy())
    assert decision.allowed is allowed
    assert why in decision.why


OWN = Policy(status_visibility="own")


@pytest.mark.parametrize("caller, action, allowed", [
    (ALICE, ReadJob("j1", "bob"), False), (ALICE, ReadJob("j1", "alice"), True), (ROOT, ReadJob("j1", "bob"), True),
    (ALICE, ListJobs("bob"), False), (ALICE, ListJobs(""), True), (ALICE, ListJobs("alice"), True),
])
def test_status_visibility_own(caller: Caller, action: object, allowed: bool) -> None:
    assert decide(caller, action, OWN).allowed is allowed


@pytest.mark.parametrize("queue, grants, ok", [
    ("ads.prod", ("ads.*",), True), ("ads", ("ads.*",), False), ("ads", ("ads",), True),
    ("adsx.prod", ("ads",), False), ("x.y", ("*",), True), ("eng.ml", ("ads.*", "eng.m?"), True), ("a", ("",), False),
])
def test_grant_globs(queue: str, grants: tuple[str, ...], ok: bool) -> None:
    assert grants_queue(grants, queue) is ok


def test_user_mapping() -> None:
    assert run_as(ALICE, "") == "alice"
    assert run_as(ALICE, "root") == "alice"        # never reached: decide refuses first
    assert run_as(ROOT, "daemon") == "daemon"
    assert run_as(Caller("ops", True, "ops", ("*",)), "") == "ops"


def test_audit_line_says_who_what_and_why() -> None:
    action = SubmitJob("eng.ml", "", 1, 1)
    line = audit_line(ALICE, action, decide(ALICE, action))
    assert line.startswith("DENIED user 'alice' SubmitJob queue='eng.ml'")
    assert "their grants are ads.*" in line


# ---- the user directory ----

def test_users_are_stored_hashed_and_resolve_by_token(tmp_path: Path) -> None:
    token = add_user(tmp_path, "alice", "alice", parse_grants("ads.*, eng.ml"), admin=False)
    assert stat.S_IMODE(os.stat(tmp_path / "auth.db").st_mode) == 0o600
    assert parse_token(token).secret.encode() not in (tmp_path / "auth.db").read_bytes()
    directory = UserDirectory(tmp_path)
    assert directory.resolve(token) == Caller("alice", False, "alice", ("ads.*", "eng.ml"))
    # added while the directory is open (another process: the CLI): works at once
    admin = bootstrap_admin(tmp_path)
    assert directory.resolve(admin).admin
    assert [u.name for u in list_users(tmp_path)] == ["admin", "alice"]
    assert remove_user(tmp_path, "alice") and not remove_user(tmp_path, "alice")
    with pytest.raises(Unauthenticated, match="not known to this master"):
        directory.resolve(token)
    with pytest.raises(Unauthenticated, match="no token"):
        directory.resolve("")
    directory.close()


def test_bad_user_input_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="name: 'Alice Smith' is not allowed"):
        add_user(tmp_path, "Alice Smith", "alice", (), False)
    with pytest.raises(InvalidArgument, match="--queues"):
        parse_grants("ads.*, rm -rf /")
    add_user(tmp_path, "bob", "bob", (), False)
    with pytest.raises(InvalidArgument, match="user bob exists"):
        add_user(tmp_path, "bob", "bob", (), False)
