"""Review finding 7 through the real `tcl-master` and a real etcd: a secured HA cluster
never comes back in plaintext, nor with a CA that etcd no longer holds.

1. A master on a fresh prefix serves plaintext (loopback) and is stopped; `tcl-master
   init` then secures the prefix, and etcd stops. The master's PKI cache is left with the
   "insecure" marker an older version wrote (what the review's master trusted).
2. The master starts again: with no PKI it may trust it opens no port and waits for etcd;
   `tcl whoami` gets no answer, least of all as an anonymous admin.
3. etcd comes back: the master binds with TLS and leads; init's token logs in.
4. While the master is down the prefix is initialised anew (another CA) and etcd stops:
   the master starts from its cached, now stale CA as a TLS standby; once etcd answers it
   refuses to lead, says why, and restarts itself with the CA etcd holds.
Every process is stopped by its pid."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from tcluster.master.identity import pkicache
from tcluster.etcd.url import parse_store_url
from tcluster.etcd.kv import EtcdKV, delete_prefix
from testkit.etcd_cluster import free_ports
from testkit.etcd_single import ETCD, SingleEtcd, start_single_etcd, stop_single_etcd
from testkit.procs import BIN, Proc

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not ETCD.exists(), reason=f"{ETCD} is missing")]
TOKEN = re.compile(r"^\s+(tcu\.\S+)$", re.M)


def master_cmd(*args: str) -> str:
    done = subprocess.run([str(BIN / "tcl-master"), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def tcl(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`tcl` with a config dir of its own and no token from the environment."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(home)}
    env.pop("TCL_TOKEN", None)
    return subprocess.run([str(BIN / "tcl"), *args], input=stdin, capture_output=True, text=True, env=env,
                          timeout=60)


def wipe(etcd: SingleEtcd, prefix: str) -> None:
    async def run() -> None:
        kv = EtcdKV([etcd.endpoint])
        try:
            await kv.txn([], [delete_prefix(prefix + "/")])
        finally:
            await kv.close()
    asyncio.run(run())


def test_a_secured_cluster_never_comes_back_in_plaintext(tmp_path: Path) -> None:
    (tmp_path / "etcd").mkdir()
    etcd, popen = start_single_etcd(tmp_path / "etcd")
    client_port, agent_port = free_ports(2)
    prefix, data, address = f"/pki-{uuid.uuid4().hex[:8]}", tmp_path / "m", f"127.0.0.1:{client_port}"
    store = ["--store", etcd.url, "--store-prefix", prefix]
    # The agent port named too: by default it is the client port + 1, which nothing reserved
    # (the CI run saw another process's connection holding it when the secure master bound).
    daemon = [str(BIN / "tcl-master"), "--listen", address, "--agent-listen", f"127.0.0.1:{agent_port}",
              "--data-dir", str(data), "--http", "off", *store]
    cache = pkicache.cache_dir(data, parse_store_url(etcd.url, data).endpoints, prefix)
    masters: list[Proc] = []

    def start(n: int) -> Proc:
        masters.append(Proc(daemon, tmp_path / f"master{n}.log"))
        return masters[-1]
    try:
        start(1).wait_for_output(r"tcl-master leading")
        assert "TLS" not in masters[0].output() and masters[0].stop() == 0
        token = TOKEN.search(master_cmd("init", *store)).group(1)        # type: ignore[union-attr]
        stop_single_etcd(popen)
        cache.mkdir(parents=True, exist_ok=True)
        (cache / pkicache.INSECURE).write_bytes(b"")     # what an older version cached in step 1

        second = start(2)
        second.wait_for_output(r"etcd unreachable")
        asked = tcl(tmp_path / "nobody", "--master", address, "whoami")
        assert asked.returncode != 0 and "anonymous" not in asked.stdout, asked
        etcd, popen = start_single_etcd(tmp_path / "etcd", ports=etcd.ports)
        second.wait_for_output(r"tcl-master leading")
        asked = tcl(tmp_path / "nobody", "--master", address, "whoami")
        assert asked.returncode != 0 and "anonymous" not in asked.stdout, asked
        assert "(TLS; agents on port" in second.output() and not (cache / pkicache.INSECURE).exists()
        assert "retrying" in second.output()            # it waited for etcd with no port open
        assert tcl(tmp_path / "admin", "login", "--master", address, stdin=token).returncode == 0
        assert "admin on" in tcl(tmp_path / "admin", "whoami").stdout
        assert second.stop() == 0

        wipe(etcd, prefix)                               # a new cluster on the prefix: another CA
        token = TOKEN.search(master_cmd("init", *store)).group(1)        # type: ignore[union-attr]
        stop_single_etcd(popen)
        third = start(3)
        third.wait_for_output(r"serving as a standby with the cached PKI")
        etcd, popen = start_single_etcd(tmp_path / "etcd", ports=etcd.ports)
        third.wait_for_output(r"refusing to lead: etcd prefix \S+ holds CA sha256:\w+ and master certificate "
                              r"that differ")
        third.wait_for_output(r"tcl-master leading")
        assert third.output().count("TLS; agents on port") == 2      # bound again, same pid
        assert tcl(tmp_path / "new", "login", "--master", address, stdin=token).returncode == 0
        assert "admin on" in tcl(tmp_path / "new", "whoami").stdout
    finally:
        for master in masters:
            master.stop()
        stop_single_etcd(popen)
