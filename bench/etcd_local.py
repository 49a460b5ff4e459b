"""A real 3-member etcd cluster on 127.0.0.1 for the benchmarks: free ports, a temp data
dir per member, every member stopped by its pid and the dirs removed at the end.

    with LocalEtcd(members=3, max_txn_ops=1024) as etcd:
        etcd.url          # etcd://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3
        etcd.cpu_seconds()

    .venv/bin/python bench/etcd_local.py     # start one, print its URL, stop on Enter
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit.etcd_cluster import free_ports  # noqa: E402
from testkit.loadgen.procstat import cpu_seconds, rss_bytes  # noqa: E402

ETCD = Path("/usr/bin/etcd")
START_TIMEOUT_S = 30.0


class LocalEtcd:
    """`members` etcd processes forming one cluster; a context manager (or start()/stop())."""

    def __init__(self, members: int = 3, max_txn_ops: int = 128, directory: Path | None = None,
                 etcd: Path = ETCD) -> None:
        self.members, self.max_txn_ops, self.etcd = members, max_txn_ops, etcd
        self._own_dir = directory is None
        self.dir = Path(tempfile.mkdtemp(prefix="tcl-etcd-")) if directory is None else directory
        self.popens: list[subprocess.Popen[bytes]] = []
        self.endpoints: list[str] = []

    @property
    def url(self) -> str:
        return "etcd://" + ",".join(self.endpoints)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.popens]

    def start(self) -> LocalEtcd:
        if not self.etcd.exists():
            raise FileNotFoundError(f"{self.etcd} is missing (Debian: apt-get install etcd-server)")
        ports = free_ports(2 * self.members)
        names = [f"m{i}" for i in range(self.members)]
        peers = [f"http://127.0.0.1:{ports[2 * i + 1]}" for i in range(self.members)]
        cluster = ",".join(f"{n}={p}" for n, p in zip(names, peers))
        token = f"tcl-bench-{os.getpid()}-{time.monotonic_ns()}"
        self.endpoints = [f"127.0.0.1:{ports[2 * i]}" for i in range(self.members)]
        try:
            for i, name in enumerate(names):
                client = f"http://{self.endpoints[i]}"
                args = [str(self.etcd), "--name", name, "--data-dir", str(self.dir / name),
                        "--listen-client-urls", client, "--advertise-client-urls", client,
                        "--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
                        "--initial-cluster", cluster, "--initial-cluster-state", "new",
                        "--initial-cluster-token", token, "--max-txn-ops", str(self.max_txn_ops),
                        "--logger", "zap", "--log-level", "warn"]
                with open(self.dir / f"{name}.log", "wb") as out:
                    self.popens.append(subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                                        start_new_session=True))
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        """Every member answers a linearizable read (so the cluster has a raft leader)."""
        from tcluster.master.store.etcdbridge import EtcdBridge
        deadline = time.monotonic() + START_TIMEOUT_S
        for endpoint in self.endpoints:
            bridge = EtcdBridge([endpoint], timeout_s=1.0)
            try:
                while True:
                    dead = [p for p in self.popens if p.poll() is not None]
                    if dead:
                        raise RuntimeError(f"etcd exited {dead[0].returncode}:\n{self.logs()[-3000:]}")
                    try:
                        bridge.call(lambda kv: kv.get("/ready-probe"), timeout_s=3.0)
                        break
                    except Exception:       # noqa: BLE001 - not up yet
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"etcd not ready within {START_TIMEOUT_S}s:\n{self.logs()[-3000:]}")
                        time.sleep(0.1)
            finally:
                bridge.close()

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.dir.glob("*.log")))

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.popens if p.poll() is None)

    def rss(self) -> int:
        return sum(rss_bytes(p.pid) for p in self.popens if p.poll() is None)

    def stop(self) -> None:
        for popen in self.popens:
            if popen.poll() is None:
                os.kill(popen.pid, signal.SIGTERM)
        for popen in self.popens:
            try:
                popen.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(popen.pid, signal.SIGKILL)
                popen.wait(10)
        self.popens = []
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalEtcd:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


if __name__ == "__main__":
    with LocalEtcd() as cluster:
        print(cluster.url, "pids", cluster.pids, flush=True)
        try:
            input("Enter stops it\n")
        except EOFError:
            pass
