"""The etcd test harness itself (testkit/etcd_cluster.py): a real 3-member cluster on
loopback serves, survives one member's death, refuses writes without quorum, and serves
again once the members are back. Also: the shared `etcd` fixture gives each test its own
prefix."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.etcd_cluster import EtcdCluster, EtcdStore, etcd_skip_reason

pytestmark = pytest.mark.skipif(etcd_skip_reason() is not None, reason=etcd_skip_reason() or "")


def test_quorum_lost_and_regained(tmp_path: Path) -> None:
    """Proves the harness: serves on every member; with one member SIGKILLed a write still
    lands; with two, writes fail; restarted on their data dirs, the members serve again
    with every acknowledged value."""
    with EtcdCluster(tmp_path, members=3) as etcd:
        assert etcd.url == "etcd://" + etcd.endpoints and len(etcd.endpoints.split(",")) == 3
        for m in etcd.members:
            etcd.put("/h/probe", m.name)
            assert etcd.etcdctl("get", "/h/probe", "--print-value-only", endpoints=m.endpoint).stdout.strip() == m.name
        etcd.kill(0)
        etcd.put_eventually("/h/one-down", "yes")
        assert etcd.get("/h/one-down") == "yes"
        etcd.kill(1)
        refused = etcd.etcdctl("put", "/h/two-down", "no", timeout_s=3.0, check=False)
        assert refused.returncode != 0, refused.stdout
        etcd.start(0)
        etcd.start(1)
        etcd.wait_ready()
        etcd.put_eventually("/h/back", "yes")
        assert etcd.get("/h/back") == "yes" and etcd.get("/h/one-down") == "yes"
        # A write refused for lack of quorum may still have been proposed and applied once
        # quorum is back: etcd's error is "not known to have happened", not "never happens".
        assert etcd.get("/h/two-down") in (None, "no")
        etcd.pause(2)
        etcd.put_eventually("/h/paused", "yes")
        etcd.resume(2)
        etcd.wait_ready()
        pids = [m.popen.pid for m in etcd.members if m.popen is not None]
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    assert not any(m.data_dir.exists() for m in etcd.members)


@pytest.mark.parametrize("n", [1, 2])
def test_shared_cluster_gives_each_test_its_own_prefix(etcd: EtcdStore, n: int) -> None:
    """Each test sees nothing of another's keys: its prefix starts empty."""
    assert etcd.prefix.startswith("/t-")
    assert etcd.cluster.keys(etcd.prefix) == []
    etcd.cluster.put(f"{etcd.prefix}/mine", str(n))
    assert etcd.cluster.keys(etcd.prefix) == [f"{etcd.prefix}/mine"]
    assert etcd.master_args() == ["--store", etcd.url, "--store-prefix", etcd.prefix]
    assert etcd.leader() is None
