"""One real etcd member on 127.0.0.1 for the tests that need a store and nothing more:
free ports, a data dir of its own, stopped by its pid at the end. The fault suite's
3-member cluster is testkit/etcd_cluster.py; this stays independent of it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from testkit.etcd_cluster import free_ports
from testkit.etcd_tls import EtcdCerts, make_etcd_certs

ETCD = Path("/usr/bin/etcd")
START_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class SingleEtcd:
    endpoint: str          # HOST:PORT for clients
    pid: int
    log: Path
    certs: EtcdCerts | None = None     # a TLS member requiring client certificates
    peer_port: int = 0

    @property
    def ports(self) -> tuple[int, int]:
        """(client, peer): to start the same member again after stopping it."""
        return int(self.endpoint.rpartition(":")[2]), self.peer_port

    @property
    def url(self) -> str:
        return f"etcd://{self.endpoint}" + (self.certs.query() if self.certs else "")


def _wait_ready(endpoint: str, popen: subprocess.Popen[bytes], log: Path, certs: EtcdCerts | None = None) -> None:
    from tcluster.master.store.etcdbridge import EtcdBridge
    from tcluster.etcd.tls import EtcdTLS
    tls = EtcdTLS(certs.ca, certs.client_cert, certs.client_key) if certs else None
    bridge = EtcdBridge([endpoint], timeout_s=1.0, tls=tls)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            if popen.poll() is not None:
                raise AssertionError(f"etcd exited {popen.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
            try:
                bridge.call(lambda kv: kv.get("/ready-probe"), timeout_s=3.0)
                return
            except Exception:       # noqa: BLE001 - not up yet
                time.sleep(0.1)
        raise AssertionError(f"etcd not ready within {START_TIMEOUT_S}s:\n{log.read_text(errors='replace')[-3000:]}")
    finally:
        bridge.close()


def start_single_etcd(directory: Path, certs: EtcdCerts | None = None,
                      ports: tuple[int, int] | None = None,
                      extra: tuple[str, ...] = ()) -> tuple[SingleEtcd, subprocess.Popen[bytes]]:
    """With certs: clients speak TLS and must show a certificate signed by certs.ca.
    `ports` (client, peer) and the same `directory`: the member that was stopped, again;
    extra: more etcd flags (e.g. a smaller --max-request-bytes)."""
    client, peer = ports or free_ports(2)
    log = directory / "etcd.log"
    scheme = "https" if certs else "http"
    args = [str(ETCD), "--name", "solo", "--data-dir", str(directory / "data"),
            "--listen-client-urls", f"{scheme}://127.0.0.1:{client}",
            "--advertise-client-urls", f"{scheme}://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"solo=http://127.0.0.1:{peer}", "--initial-cluster-state", "new"]
    if certs:
        args += ["--cert-file", str(certs.server_cert), "--key-file", str(certs.server_key),
                 "--trusted-ca-file", str(certs.ca), "--client-cert-auth"]
    args += list(extra)
    with open(log, "ab") as out:
        popen = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    member = SingleEtcd(f"127.0.0.1:{client}", popen.pid, log, certs, peer)
    try:
        _wait_ready(member.endpoint, popen, log, certs)
    except BaseException:
        stop_single_etcd(popen)
        raise
    return member, popen


def stop_single_etcd(popen: subprocess.Popen[bytes]) -> None:
    if popen.poll() is None:
        os.kill(popen.pid, signal.SIGTERM)
        try:
            popen.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(popen.pid, signal.SIGKILL)
            popen.wait(10)


@pytest.fixture(scope="module")
def single_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SingleEtcd]:
    if not ETCD.exists():
        pytest.skip(f"{ETCD} is missing (Debian: apt-get install etcd-server)")
    member, popen = start_single_etcd(tmp_path_factory.mktemp("etcd"))
    try:
        yield member
    finally:
        stop_single_etcd(popen)


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SingleEtcd]:
    """One member that speaks only TLS and requires a client certificate (--client-cert-auth)."""
    if not ETCD.exists():
        pytest.skip(f"{ETCD} is missing (Debian: apt-get install etcd-server)")
    directory = tmp_path_factory.mktemp("etcd-tls")
    member, popen = start_single_etcd(directory, make_etcd_certs(directory / "certs"))
    try:
        yield member
    finally:
        stop_single_etcd(popen)
