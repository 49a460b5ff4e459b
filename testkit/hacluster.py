"""Highly available masters as REAL processes: a private etcd cluster, N `tcl-master`s on
ports chosen up front (each advertises its own, all with the same --store and
--store-prefix), agents started with `--master a,b,c`, and `tcl --master a,b,c`.

`HACluster` is a `testkit.faultcluster.Cluster` whose `address` is the master list, so
`tcl()`, `submit()`, `status()`, `start_agent()`, `wait_*()` and the teardown sweep work
unchanged; the gRPC stub (`jobs`) and the `Watch` go to the current leader's address.

Who leads: `leads(addr)` asks a master directly (a standby answers UNAVAILABLE), and
`leader_key()` reads P/leader with etcdctl. Timeouts only bound waits.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from testkit.procs import BIN, STOP_WAIT_S, Proc
from testkit.etcd_cluster import EtcdCluster, EtcdStore, free_ports, unique_prefix
from testkit.faultcluster import Cluster, leads, wait_for
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc

LEADER_METADATA = "tcl-leader"


@dataclass
class Master:
    index: int
    address: str
    data_dir: Path
    proc: Proc | None = None
    starts: int = 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.popen.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.popen.pid


def standby_answer(address: str, timeout_s: float = 2.0) -> tuple[grpc.StatusCode, str, str] | None:
    """None if the master at `address` serves a client call; else (code, details,
    tcl-leader metadata) of the refusal (the contract's standby answer)."""
    with grpc.insecure_channel(address) as channel:
        try:
            jobs_pb2_grpc.JobServiceStub(channel).List(jobs_pb2.ListJobsRequest(limit=1), timeout=timeout_s)
        except grpc.RpcError as e:
            meta = dict(e.trailing_metadata() or ())  # type: ignore[attr-defined]
            return e.code(), e.details() or "", str(meta.get(LEADER_METADATA, ""))  # type: ignore[attr-defined]
    return None


@dataclass
class HACluster(Cluster):
    """Build with `HACluster(tmp, etcd=..., etcd_cluster=...)` (the `ha` fixture does), then
    `start_masters()`, `start_agent(tag)`."""

    etcd_cluster: EtcdCluster | None = None
    n_masters: int = 3
    lease_ttl_s: int = 5
    master_extra: tuple[str, ...] = ()     # more tcl-master flags, e.g. --federation-lm-id
    masters: list[Master] = field(default_factory=list)
    leader_address: str = ""      # the last leader found; the Watch and `jobs` use it

    def __post_init__(self) -> None:
        assert self.etcd_cluster is not None
        self.store = "etcd"
        self.etcd = EtcdStore(self.etcd_cluster, unique_prefix())
        super().__post_init__()
        ports = free_ports(self.n_masters)
        self.masters = [Master(i, f"127.0.0.1:{p}", self.tmp / f"master{i}") for i, p in enumerate(ports)]
        self.address = ",".join(m.address for m in self.masters)   # what tcl and agents get

    # ---- masters ----

    def master_command(self, m: Master) -> list[str]:
        assert self.etcd is not None
        return [str(BIN / "tcl-master"), "--listen", m.address, "--data-dir", str(m.data_dir),
                *self.etcd.master_args(), "--lease-ttl-s", str(self.lease_ttl_s), "--advertise", m.address,
                "--http", "off",   # no HA test reads a dashboard (see testkit.procs.DASHBOARD_OFF)
                "--node-timeout-s", str(self.node_timeout_s), "--lost-timeout-s", str(self.lost_timeout_s),
                "--start-timeout-s", str(self.start_timeout_s),
                "--heartbeat-interval-s", str(self.heartbeat_interval_s), *self.master_extra]

    def start_one(self, i: int, wait_serving: bool = True) -> Master:
        """Starts master i (again, on its port and data dir); waits until its port answers
        gRPC, as leader or standby."""
        m = self.masters[i]
        assert not m.alive(), f"master {i} still runs"
        m.starts += 1
        m.proc = Proc(self.master_command(m), self.tmp / f"master{i}.{m.starts}.log")
        if wait_serving:
            proc = m.proc
            wait_for(lambda: proc.popen.poll() is not None or self.answers(i), 30, f"master {i} answers on {m.address}")
            if proc.popen.poll() is not None:
                raise AssertionError(f"master {i} exited {proc.popen.returncode}:\n{proc.output()[-3000:]}")
        return m

    def answers(self, i: int) -> bool:
        """Master i accepts connections on its port (it serves, as leader or standby)."""
        host, _, port = self.masters[i].address.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=1.0).close()
        except OSError:
            return False
        return True

    def start_masters(self, timeout_s: float = 30.0) -> int:
        """Starts every master, first 0 then the others (so 0 is the likely leader); returns
        the index of the one that leads."""
        for i in range(self.n_masters):
            self.start_one(i, wait_serving=False)
            if i == 0:
                self.wait_leader(timeout_s=timeout_s)
        for i in range(self.n_masters):
            wait_for(lambda: self.check_running(i) and self.answers(i), timeout_s, f"master {i} answers")
        return self.wait_leader(timeout_s=timeout_s)

    def check_running(self, i: int) -> bool:
        """True while master i runs; raises with its output if it exited."""
        m = self.masters[i]
        assert m.proc is not None, f"master {i} was not started"
        if m.proc.popen.poll() is not None:
            raise AssertionError(f"master {i} exited {m.proc.popen.returncode}:\n{m.proc.output()[-3000:]}")
        return True

    def kill_one(self, i: int, signum: int = signal.SIGKILL) -> None:
        m = self.masters[i]
        if m.proc is not None:
            m.proc.popen.send_signal(signal.SIGCONT)
            m.proc.stop(signum)
            m.proc = None
        self._close_channel()

    def pause_one(self, i: int) -> None:
        assert self.masters[i].proc is not None
        self.masters[i].proc.popen.send_signal(signal.SIGSTOP)   # type: ignore[union-attr]

    def resume_one(self, i: int) -> None:
        assert self.masters[i].proc is not None
        self.masters[i].proc.popen.send_signal(signal.SIGCONT)   # type: ignore[union-attr]

    def leading(self, exclude: set[int] = frozenset()) -> list[int]:   # type: ignore[assignment]
        """The live masters (not in `exclude`) that serve a client call right now."""
        return [m.index for m in self.masters
                if m.index not in exclude and m.alive() and leads(m.address, timeout_s=1.0)]

    def wait_leader(self, exclude: set[int] = frozenset(), timeout_s: float = 30.0,   # type: ignore[assignment]
                    interval_s: float = 0.05) -> int:
        """Waits until exactly one live master outside `exclude` serves; returns its index
        and remembers its address for `jobs` and the Watch."""
        def one() -> list[int] | None:
            started = [m.index for m in self.masters if m.proc is not None and m.index not in exclude]
            assert started, f"no master outside {sorted(exclude)} runs"
            if all(self.masters[i].proc.popen.poll() is not None for i in started):   # type: ignore[union-attr]
                self.check_running(started[0])
            found = self.leading(exclude)
            return found if len(found) == 1 else None
        found = wait_for(one, timeout_s, f"one master leads (excluding {sorted(exclude)})", interval_s)
        self.leader_address = self.masters[found[0]].address
        self._close_channel()
        return found[0]

    def leader_key(self) -> dict | None:
        """P/leader as etcd has it (None: no master leads)."""
        assert self.etcd is not None
        return self.etcd.leader()

    def leader_key_index(self) -> int | None:
        """The index of the master P/leader names by its client address."""
        key = self.leader_key()
        if key is None:
            return None
        for m in self.masters:
            if key.get("client") == m.address:
                return m.index
        raise AssertionError(f"P/leader names no master of this cluster: {key}")

    def status_json(self, timeout_s: float = 30.0) -> object:
        """`tcl-master status --store ... --store-prefix ... -o json`."""
        assert self.etcd is not None
        out = subprocess.run([str(BIN / "tcl-master"), "status", *self.etcd.master_args(), "-o", "json"],
                             capture_output=True, text=True, timeout=timeout_s)
        if out.returncode != 0:
            raise AssertionError(f"tcl-master status exited {out.returncode}: {out.stderr[-2000:]}")
        return json.loads(out.stdout)

    def status_roles(self) -> dict[int, str]:
        """Master index -> role ("leader"/"standby") as `tcl-master status -o json` reports
        every live master (its `masters` list: id, client, agent, http, role)."""
        report = self.status_json()
        assert isinstance(report, dict), report
        by_address = {m.address: m.index for m in self.masters}
        return {by_address[row["client"]]: row["role"] for row in report.get("masters", [])
                if row.get("client") in by_address}

    # ---- the client side: gRPC to the leader ----

    @property
    def jobs(self) -> jobs_pb2_grpc.JobServiceStub:
        if self._channel is None:
            assert self.leader_address, "no leader found yet: call wait_leader()"
            self._channel = grpc.insecure_channel(self.leader_address)
        return jobs_pb2_grpc.JobServiceStub(self._channel)

    def all_jobs(self) -> dict[str, jobs_pb2.Job]:
        """Every job the current leader has, by id (gRPC, all pages)."""
        listed = self.jobs.List(jobs_pb2.ListJobsRequest(all=True), timeout=30)
        return {job.id: job for job in listed.jobs}

    def registrations(self, name: str) -> int:
        """How many times this agent's current process registered with a master."""
        proc = self.agents[name].proc
        assert proc is not None
        return proc.output().count("registered with")

    # ---- teardown ----

    def close(self) -> list[str]:
        """Masters by pid, all at once (a paused one is resumed first; SIGKILL for any still
        there after STOP_WAIT_S), then agents and the sweep."""
        running = [m for m in self.masters if m.proc is not None]
        for m in running:
            if m.proc.popen.poll() is None:   # type: ignore[union-attr]
                m.proc.popen.send_signal(signal.SIGCONT)   # type: ignore[union-attr]
                m.proc.popen.send_signal(signal.SIGTERM)   # type: ignore[union-attr]
        deadline = time.monotonic() + STOP_WAIT_S
        for m in running:
            assert m.proc is not None
            try:
                m.proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"master {m.index} (pid {m.pid}) still runs {STOP_WAIT_S}s after SIGTERM: SIGKILL")
            m.proc.stop(signal.SIGKILL)   # a no-op when it exited; closes the log
            m.proc = None
        self._close_channel()
        return super().close()

    def log_tail(self, chars: int = 3000) -> str:
        tail = super().log_tail(chars)
        if self.etcd_cluster is not None:
            tail += "\n" + self.etcd_cluster.log_tail(800)
        return tail


class Timer:
    """`with Timer("what") as t: ...`, then `t.s`; prints the seconds it took."""

    def __init__(self, what: str) -> None:
        self.what, self.s, self._start = what, 0.0, 0.0

    def __enter__(self) -> Timer:
        self._start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.s = time.monotonic() - self._start
        print(f"{self.what}: {self.s:.2f} s")
