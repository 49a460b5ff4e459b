"""A real etcd cluster on 127.0.0.1 for tests and benches: N members, each with its own
name, data dir, client and peer ports, one shared --initial-cluster. Members are started,
killed (SIGKILL), paused and resumed by pid; `close()` kills every member by pid and
removes the data.

Readiness is polled per member on its own client URL (`/health`, short timeout), never by
one `etcdctl endpoint health` over all: that one can hang on a slow member.

Fixtures (imported by tests/conftest.py):
- `etcd_session`: ONE 3-member cluster per pytest session (started on first use);
- `etcd`: that cluster seen through a unique key prefix per test (`/t-<uuid>`), so tests
  never share state. Tests that kill or pause members must start their own EtcdCluster.
Both skip, saying why, when the `etcd`/`etcdctl` binaries are not installed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
ETCDCTL = shutil.which("etcdctl") or "/usr/bin/etcdctl"
READY_TIMEOUT_S = 30.0
STOP_WAIT_S = 10.0


def etcd_skip_reason() -> str | None:
    """None when etcd and etcdctl are installed, else why the etcd tests cannot run."""
    for binary in (ETCD, ETCDCTL):
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            return f"etcd not installed ({binary} missing; Debian: apt-get install etcd-server etcd-client)"
    return None


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (held open together while chosen, so distinct)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Member:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


class EtcdCluster:
    """`EtcdCluster(tmp_dir, members=3)` starts the cluster and waits until every member
    answers healthy. `kill(i)`, `start(i)`, `pause(i)`, `resume(i)`, `close()`."""

    def __init__(self, tmp_dir: Path, members: int = 3, start: bool = True) -> None:
        reason = etcd_skip_reason()
        if reason:
            raise RuntimeError(reason)
        self.dir = Path(tmp_dir) / f"etcd-{uuid.uuid4().hex[:6]}"
        self.dir.mkdir(parents=True)
        self.token = f"tcl-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        ports = free_ports(2 * members)
        self.members = [Member(f"m{i}", ports[2 * i], ports[2 * i + 1], self.dir / f"m{i}.data",
                               self.dir / f"m{i}.log") for i in range(members)]
        self.initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        self._paused: set[int] = set()
        if start:
            try:
                for i in range(members):
                    self._spawn(i)
                self.wait_ready()
            except BaseException:
                self.close()
                raise

    # ---- addresses ----

    @property
    def endpoints(self) -> str:
        """`127.0.0.1:p1,127.0.0.1:p2,...` (every member, live or not)."""
        return ",".join(m.endpoint for m in self.members)

    def live_endpoints(self) -> str:
        """The endpoints of the members running and not paused (all of them if none is)."""
        live = [m.endpoint for i, m in enumerate(self.members) if m.alive() and i not in self._paused]
        return ",".join(live) or self.endpoints

    @property
    def url(self) -> str:
        """The master's --store value: `etcd://127.0.0.1:p1,...`."""
        return f"etcd://{self.endpoints}"

    # ---- lifecycle ----

    def _spawn(self, i: int) -> None:
        m = self.members[i]
        assert not m.alive(), f"{m.name} is running"
        m.starts += 1
        state = "existing" if (m.data_dir / "member").is_dir() else "new"
        args = [ETCD, "--name", m.name, "--data-dir", str(m.data_dir),
                "--listen-client-urls", m.client_url, "--advertise-client-urls", m.client_url,
                "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls", m.peer_url,
                "--initial-cluster", self.initial_cluster, "--initial-cluster-token", self.token,
                "--initial-cluster-state", state,
                "--heartbeat-interval", "50", "--election-timeout", "500",
                "--listen-metrics-urls", "", "--log-outputs", "stderr", "--logger", "zap"]
        with open(m.log, "ab") as log:
            log.write(f"\n=== start {m.starts}: {' '.join(args)}\n".encode())
            log.flush()
            m.popen = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)

    def start(self, i: int, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Restarts member i on its data dir; waits until it answers on its client URL
        (not until it is healthy: alone, without quorum, it never is)."""
        self._spawn(i)
        self._wait(lambda: self.answers(i), timeout_s, f"etcd {self.members[i].name} answers")

    def kill(self, i: int) -> None:
        """SIGKILL member i by pid (a paused member is killed too)."""
        m = self.members[i]
        if m.popen is not None and m.popen.poll() is None:
            m.popen.send_signal(signal.SIGKILL)
            m.popen.wait(STOP_WAIT_S)
        self._paused.discard(i)

    def pause(self, i: int) -> None:
        popen = self.members[i].popen
        assert popen is not None and popen.poll() is None
        popen.send_signal(signal.SIGSTOP)
        self._paused.add(i)

    def resume(self, i: int) -> None:
        popen = self.members[i].popen
        assert popen is not None and popen.poll() is None
        popen.send_signal(signal.SIGCONT)
        self._paused.discard(i)

    def close(self) -> None:
        """Kills every member by pid (SIGKILL, paused ones too) and removes the data. Not
        SIGTERM: its graceful stop hands leadership to a peer first, and with every member
        going at once that took ~6 s per cluster, for data that is deleted next."""
        for m in self.members:
            if m.popen is not None and m.popen.poll() is None:
                m.popen.kill()
        for m in self.members:
            if m.popen is not None:
                m.popen.wait(STOP_WAIT_S)
        self._paused.clear()
        for m in self.members:
            shutil.rmtree(m.data_dir, ignore_errors=True)

    # ---- health ----

    def _get(self, i: int, path: str, timeout_s: float = 1.0) -> bytes | None:
        try:
            with urllib.request.urlopen(self.members[i].client_url + path, timeout=timeout_s) as response:
                return response.read()
        except (urllib.error.URLError, OSError, TimeoutError):
            return None

    def answers(self, i: int) -> bool:
        """Member i's client port answers HTTP (it may have no leader)."""
        return self.members[i].alive() and self._get(i, "/version") is not None

    def healthy(self, i: int) -> bool:
        """Member i answers and sees a leader (etcd's own /health)."""
        if not self.members[i].alive() or i in self._paused:
            return False
        body = self._get(i, "/health")
        if body is None:
            return False
        try:
            return json.loads(body).get("health") in ("true", True)
        except ValueError:
            return False

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Every running, unpaused member is healthy (has a leader)."""
        live = [i for i, m in enumerate(self.members) if m.alive() and i not in self._paused]
        self._wait(lambda: all(self.healthy(i) for i in live), timeout_s,
                   f"etcd members {[self.members[i].name for i in live]} healthy")

    def _wait(self, check, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout_s
        while not check():
            for m in self.members:
                if m.popen is not None and m.popen.poll() is not None and m.popen.returncode not in (-9, 0):
                    raise AssertionError(f"etcd {m.name} exited {m.popen.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout_s}s: {what}\n{self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, chars: int = 2000) -> str:
        return "\n".join(f"--- {m.log.name}\n{m.log.read_text(errors='replace')[-chars:]}"
                         for m in self.members if m.log.exists())

    # ---- etcdctl, for checks from outside ----

    def etcdctl(self, *args: str, timeout_s: float = 5.0, check: bool = True,
                endpoints: str | None = None) -> subprocess.CompletedProcess[str]:
        """etcdctl against `endpoints`, by default the members running and not paused (the
        3.4 client can spend its whole timeout on a dead first endpoint)."""
        cmd = [ETCDCTL, "--endpoints", endpoints or self.live_endpoints(), "--dial-timeout", "1s",
               "--command-timeout", f"{max(1, int(timeout_s) - 1)}s", *args]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s + 5,
                                env={**os.environ, "ETCDCTL_API": "3"})
        if check and result.returncode != 0:
            raise AssertionError(f"etcdctl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
        return result

    def put(self, key: str, value: str, timeout_s: float = 5.0) -> None:
        self.etcdctl("put", key, value, timeout_s=timeout_s)

    def put_eventually(self, key: str, value: str, timeout_s: float = 30.0) -> float:
        """Retries `put` until it succeeds (right after a leader dies, the first proposals
        can hang for etcd's request timeout); returns the seconds it took."""
        start = time.monotonic()
        while True:
            result = self.etcdctl("put", key, value, timeout_s=3.0, check=False)
            if result.returncode == 0:
                return time.monotonic() - start
            if time.monotonic() - start > timeout_s:
                raise AssertionError(f"etcd refused `put {key}` for {timeout_s}s: {result.stderr.strip()[-500:]}")
            time.sleep(0.1)

    def get(self, key: str, timeout_s: float = 5.0) -> str | None:
        """The value of `key`, None when there is no such key; raises when etcd fails."""
        out = self.etcdctl("get", key, "-w", "json", timeout_s=timeout_s).stdout
        kvs = json.loads(out).get("kvs") or []
        if not kvs:
            return None
        return base64.b64decode(kvs[0]["value"]).decode()

    def get_fast(self, key: str, timeout_s: float = 1.0) -> tuple[str | None, int] | None:
        """(value or None, create_revision) of `key` through etcd's JSON gateway on the
        first live member that answers (no etcdctl process: for tight polling); None when
        no member answered."""
        body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
        for i, m in enumerate(self.members):
            if not m.alive() or i in self._paused:
                continue
            request = urllib.request.Request(m.client_url + "/v3/kv/range", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=timeout_s) as response:
                    kvs = json.loads(response.read()).get("kvs") or []
            except (urllib.error.URLError, OSError, TimeoutError, ValueError):
                continue
            if not kvs:
                return None, 0
            return base64.b64decode(kvs[0]["value"]).decode(), int(kvs[0].get("create_revision", 0))
        return None

    def get_json(self, key: str, timeout_s: float = 5.0) -> dict | None:
        value = self.get(key, timeout_s)
        return None if value is None else json.loads(value)

    def keys(self, prefix: str, timeout_s: float = 10.0) -> list[str]:
        out = self.etcdctl("get", prefix, "--prefix", "--keys-only", timeout_s=timeout_s).stdout
        return [line for line in out.splitlines() if line]

    def __enter__(self) -> EtcdCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class EtcdStore:
    """One test's view of the shared cluster: the store URL and a prefix of its own."""

    cluster: EtcdCluster
    prefix: str

    @property
    def url(self) -> str:
        return self.cluster.url

    @property
    def endpoints(self) -> str:
        return self.cluster.endpoints

    def master_args(self) -> list[str]:
        return ["--store", self.url, "--store-prefix", self.prefix]

    def leader(self) -> dict | None:
        """The JSON in P/leader (None when no master leads)."""
        return self.cluster.get_json(f"{self.prefix}/leader")


def unique_prefix() -> str:
    return f"/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def etcd_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    """ONE 3-member etcd cluster for the whole session, on first use. Never kill or pause
    its members: tests that do start their own EtcdCluster."""
    reason = etcd_skip_reason()
    if reason:
        pytest.skip(reason)
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd-shared"))
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def etcd(etcd_session: EtcdCluster) -> EtcdStore:
    """The shared cluster under a prefix no other test uses (`/t-<uuid>`)."""
    return EtcdStore(etcd_session, unique_prefix())
