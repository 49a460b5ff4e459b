"""The identity commands through the real `tcl-master` binary on an etcd store: init, then
users, join tokens and revocation with --store, as an operator of HA masters runs them."""

from __future__ import annotations

import json
import re
import subprocess
import uuid

import pytest

from tcluster.security.tokens import parse_token
from testkit.etcd_single import SingleEtcd, single_etcd  # noqa: F401 - a fixture
from testkit.procs import BIN

pytestmark = [pytest.mark.e2e]


def master_cmd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "tcl-master"), *args], capture_output=True, text=True, timeout=60)


def test_init_users_tokens_and_revoke_on_etcd(single_etcd: SingleEtcd, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = ["--store", single_etcd.url, "--store-prefix", f"/e2e-{uuid.uuid4().hex[:8]}",
             "--data-dir", str(tmp_path / "unused")]
    init = master_cmd("init", *store, "--advertise", "m1.example.org")
    assert init.returncode == 0, init.stderr
    fingerprint = re.search(r"CA fingerprint: (sha256:[0-9a-f]{64})", init.stdout).group(1)   # type: ignore[union-attr]
    assert "in etcd under /e2e-" in init.stdout and "master.tcluster" in init.stdout
    assert not (tmp_path / "unused").exists()          # nothing of the identity went to the data dir

    added = master_cmd("user", "add", "alice", "--unix-user", "alice", "--queues", "ads.*", *store)
    assert added.returncode == 0, added.stderr
    assert parse_token(added.stdout.strip()).ca_fingerprint == fingerprint
    listed = master_cmd("user", "list", "-o", "json", *store)
    assert [u["name"] for u in json.loads(listed.stdout)] == ["admin", "alice"]

    token = master_cmd("join-token", "create", "--labels", "rack=r1", "-o", "json", *store)
    assert token.returncode == 0, token.stderr
    assert json.loads(token.stdout)["token"].startswith(f"tcl1.{fingerprint.removeprefix('sha256:')}")

    assert master_cmd("user", "remove", "alice", *store).returncode == 0
    assert master_cmd("user", "remove", "alice", *store).returncode == 1
    revoke = master_cmd("node", "revoke", "n1", *store)
    assert revoke.returncode == 1 and "holds no live certificate" in revoke.stderr

    again = master_cmd("init", *store)
    assert again.returncode == 1 and "already exists in etcd" in again.stderr and fingerprint in again.stderr


def test_bad_store_flags_exit_2_naming_the_flag() -> None:
    bad = master_cmd("user", "list", "--store", "etcd://no-port")
    assert bad.returncode == 2 and "--store:" in bad.stderr
    prefix = master_cmd("join-token", "create", "--store", "etcd://127.0.0.1:1", "--store-prefix", "x")
    assert prefix.returncode == 2 and "--store-prefix" in prefix.stderr
