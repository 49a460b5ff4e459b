"""A cluster of REAL processes for fault tests: one `tcl-master`, several `tcl-agent`s
(real cgroup runtime), each agent optionally behind its own TcpProxy; helpers to kill,
pause and restart them, to run `tcl`, to read a node's task cgroups, and to wait with
bounded timeouts. `close()` stops everything by pid and sweeps every node it started.

Timeouts only bound waits; nothing here asserts how long something took.

TCL_FAULTS_COMPAT=1 drops daemon flags the installed binaries do not know yet (and submits
retries / log caps through gRPC when `tcl submit` lacks the flags): only for running this
suite against code older than the interface it is written for. Off by default.

`store`: "sqlite" (default: the master's own data dir, no --store flag) or "etcd" (give an
`EtcdStore`: the master runs with `--store etcd://... --store-prefix <unique>` and a short
lease, on a port chosen up front so that it can advertise it; after each start the cluster
waits until that master leads, as a SIGKILLed predecessor's lease must expire first).
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TypeVar

import grpc

from testkit.procs import BIN, JOB_ENDS, TCL_CWD, Proc, job_reached, leaked_cgroups, node_subtrees, sweep_node
from testkit.etcd_cluster import EtcdStore, free_ports
from testkit.proxy import TcpProxy
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc
from testkit.inproc import tcl_in_process
from testkit.patience import patient

T = TypeVar("T")
CGROUP_ROOT = Path("/sys/fs/cgroup")
JOB_DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}
TASK_DONE = {"SUCCEEDED", "FAILED", "KILLED", "LOST"}
COMPAT = os.environ.get("TCL_FAULTS_COMPAT") == "1"
STORES = ("sqlite", "etcd")
ETCD_LEASE_TTL_S = 3   # short, so a restart after SIGKILL waits little; not so short that a loaded host loses it


def node_name(tag: str) -> str:
    """Carries this pytest's pid, so the session sweep in tests/conftest.py finds it."""
    return f"{tag}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def skip_reason() -> str | None:
    """Runs wherever the agent's cgroup backend works: v1 on the host, v2 in the VM guest."""
    from testkit.cgroups import SKIP_REASON
    return SKIP_REASON or None


@functools.cache
def _known_flags(binary: str, *subcommand: str) -> frozenset[str]:
    out = subprocess.run([str(BIN / binary), *subcommand, "--help"], capture_output=True, text=True, timeout=30)
    return frozenset(re.findall(r"--[a-z][a-z0-9-]*", out.stdout))


def _compat_args(binary: str, args: list[str]) -> list[str]:
    """Without COMPAT: args as given. With it: drops `--flag value` pairs the binary lacks."""
    if not COMPAT:
        return args
    known, kept, skip = _known_flags(binary), [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg.startswith("--") and arg not in known and i + 1 < len(args):
            print(f"[compat] {binary} has no {arg}: dropped")
            skip = True
            continue
        kept.append(arg)
    return kept


def wait_for(check: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.1) -> T:
    """Polls `check` until it returns something truthy; fails naming `what` after timeout_s
    (stretched on a slow machine: testkit/patience.py). A call in `check` that outlived its
    own deadline (DEADLINE_EXCEEDED: a master slow under emulation beside a CPU hog) counts
    as not yet: this wait's deadline is the one the test means."""
    timeout_s = patient(timeout_s)
    deadline = time.monotonic() + timeout_s
    last: T | grpc.RpcError | None = None
    while True:
        try:
            last = check()
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
            last = e
        if last and not isinstance(last, grpc.RpcError):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what} (last: {last!r})")
        time.sleep(interval_s)


def leads(address: str, timeout_s: float = 2.0) -> bool:
    """The master at `address` answers a client call (a standby answers UNAVAILABLE)."""
    with grpc.insecure_channel(address) as channel:
        try:
            jobs_pb2_grpc.JobServiceStub(channel).List(jobs_pb2.ListJobsRequest(limit=1), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return True


def wait_value(get: Callable[[], T], ok: Callable[[T], bool], timeout_s: float, what: str,
               interval_s: float = 0.1) -> T:
    """Polls `get()` until `ok(value)`; returns that value (fails naming `what`)."""
    box: list[T] = []

    def check() -> bool:
        box[:] = [get()]
        return ok(box[0])
    wait_for(check, timeout_s, what, interval_s)
    return box[0]


def task_cgroups(node: str) -> list[str]:
    """The task keys (`<task_id>.<attempt>`) with a cgroup under tcluster/<node>, any hierarchy."""
    keys: set[str] = set()
    for base in node_subtrees(node):
        try:
            keys.update(p.name for p in base.iterdir() if p.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            continue
    return sorted(keys)


def split_key(key: str) -> tuple[str, int]:
    """`job.0.2` -> (`job.0`, 2)."""
    task_id, _, attempt = key.rpartition(".")
    return task_id, int(attempt)


@dataclass
class Agent:
    name: str
    state_dir: Path
    proxy: TcpProxy | None
    extra: tuple[str, ...]
    proc: Proc | None = None
    starts: int = 0


@dataclass
class Cluster:
    """Real master and agents under `tmp`. Build with `Cluster(tmp)`, then start_master()."""

    tmp: Path
    node_timeout_s: float = 2.0
    lost_timeout_s: float = 2.0
    start_timeout_s: float = 20.0
    heartbeat_interval_s: float = 0.2
    store: str = "sqlite"
    etcd: EtcdStore | None = None
    data_dir: Path | None = None
    master: Proc | None = None
    address: str = ""
    agents: dict[str, Agent] = field(default_factory=dict)
    _master_starts: int = 0
    _channel: grpc.Channel | None = None

    # ---- master ----

    def __post_init__(self) -> None:
        assert self.store in STORES, self.store
        assert (self.store == "etcd") == (self.etcd is not None), "store etcd needs an EtcdStore, sqlite none"

    def store_args(self, listen: str) -> list[str]:
        """Nothing for SQLite (today's default); etcd: the store, a prefix, a lease, the address."""
        if self.etcd is None:
            return []
        return [*self.etcd.master_args(), "--lease-ttl-s", str(ETCD_LEASE_TTL_S), "--advertise", listen,
                "--http", "off"]   # no test here reads it (the default 7080 is one per host)

    def master_args(self, listen: str) -> list[str]:
        assert self.data_dir is not None
        return _compat_args("tcl-master", [
            "--listen", listen, "--data-dir", str(self.data_dir), *self.store_args(listen),
            "--node-timeout-s", str(self.node_timeout_s), "--lost-timeout-s", str(self.lost_timeout_s),
            "--start-timeout-s", str(self.start_timeout_s),
            "--heartbeat-interval-s", str(self.heartbeat_interval_s)])

    def start_master(self, data_dir: Path | None = None, lead_timeout_s: float = 30.0) -> str:
        """Starts (or restarts, on the same port and data dir) the master; returns its
        address. With etcd, returns once it leads."""
        self.data_dir = data_dir or self.data_dir or self.tmp / "master"
        if not self.address and self.etcd is not None:
            self.address = f"127.0.0.1:{free_ports(1)[0]}"   # known before the start: it is advertised
        listen = self.address or "127.0.0.1:0"
        self._master_starts += 1
        log = self.tmp / f"master.{self._master_starts}.log"
        self.master = Proc([str(BIN / "tcl-master"), *self.master_args(listen)], log)
        try:
            if self.etcd is None:
                port = self.master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)").group(1)
            else:
                port = listen.rpartition(":")[2]
                master = self.master
                wait_for(lambda: master.popen.poll() is not None or leads(listen), lead_timeout_s,
                         f"the master on {listen} leads (store {self.etcd.url} {self.etcd.prefix})")
                if master.popen.poll() is not None:
                    raise AssertionError(f"tcl-master exited {master.popen.returncode}:\n{master.output()[-3000:]}")
        except BaseException:
            self.master.stop(signal.SIGKILL)
            raise
        self.address = f"127.0.0.1:{port}"
        for agent in self.agents.values():
            if agent.proxy is not None:
                agent.proxy.target = ("127.0.0.1", int(port))
        return self.address

    def kill_master(self, signum: int = signal.SIGKILL) -> None:
        assert self.master is not None
        self.master.stop(signum)
        self.master = None
        self._close_channel()

    # ---- agents ----

    def start_agent(self, tag: str, proxied: bool = False, cpus: str = "2", memory: str = "2Gi",
                    extra: tuple[str, ...] = ()) -> Agent:
        """A new node named after `tag` (and this pid), behind its own proxy if `proxied`."""
        name = node_name(tag)
        target = self.address.rpartition(":")
        proxy = TcpProxy((target[0], int(target[2]))) if proxied else None
        agent = Agent(name, self.tmp / "agents" / name, proxy, ("--cpus", cpus, "--memory", memory, *extra))
        self.agents[name] = agent
        self.restart_agent(name)
        return agent

    def restart_agent(self, name: str, wait_registered: bool = True) -> Agent:
        agent = self.agents[name]
        assert agent.proc is None or agent.proc.popen.poll() is not None, f"{name} still runs"
        agent.starts += 1
        master = agent.proxy.address if agent.proxy else self.address
        args = _compat_args("tcl-agent", [
            "--master", master, "--node", name, "--state-dir", str(agent.state_dir), "--runtime", "auto",
            "--heartbeat-interval-s", "0.2", *agent.extra])
        agent.proc = Proc([str(BIN / "tcl-agent"), *args], self.tmp / f"{name}.{agent.starts}.log")
        if wait_registered:
            self.wait_registered(name)
        return agent

    def wait_registered(self, name: str, timeout_s: float = 30.0) -> None:
        proc = self.agents[name].proc
        assert proc is not None
        proc.wait_for_output(r"registered with", timeout_s)

    def kill_agent(self, name: str, signum: int = signal.SIGKILL) -> None:
        agent = self.agents[name]
        if agent.proc is not None:
            agent.proc.stop(signum)
            agent.proc = None

    def pause_agent(self, name: str) -> None:
        proc = self.agents[name].proc
        assert proc is not None
        proc.popen.send_signal(signal.SIGSTOP)

    def resume_agent(self, name: str) -> None:
        proc = self.agents[name].proc
        assert proc is not None
        proc.popen.send_signal(signal.SIGCONT)

    # ---- the client side ----

    def tcl(self, *args: str, check: bool = True, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        """`tcl` in this process (testkit/inproc.py: the subject is the daemons, and a poll
        costs no Python start); the binary itself against an older revision's daemons."""
        if COMPAT:
            result = subprocess.run([str(BIN / "tcl"), "--master", self.address, *args], capture_output=True,
                                    text=True, timeout=patient(timeout_s), cwd=TCL_CWD)
        else:
            result = tcl_in_process(self.address, *args)
        if check and result.returncode != 0:
            raise AssertionError(f"tcl {' '.join(args)[:200]} exited {result.returncode}:\n"
                                 f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
        return result

    def tcl_json(self, *args: str) -> object:
        return json.loads(self.tcl(*args, "-o", "json").stdout)

    def status(self, job_id: str) -> dict:
        job = self.tcl_json("status", job_id)
        assert isinstance(job, dict)
        return job

    def nodes(self) -> dict[str, dict]:
        listed = self.tcl_json("nodes")
        assert isinstance(listed, list)
        return {n["name"]: n for n in listed}

    def submit(self, *command: str, retries: int | None = None, log_max: str | None = None,
               cpu: str = "0.1", mem: str = "64Mi", tasks: int = 1) -> str:
        """`tcl submit` with the issue's flags; prints nothing, returns the job id."""
        flags = ["--cpu", cpu, "--mem", mem, "--tasks", str(tasks)]
        flags += ["--retries", str(retries)] if retries is not None else []
        flags += ["--log-max", log_max] if log_max is not None else []
        if COMPAT and any(f not in _known_flags("tcl", "submit") for f in flags[::2]):
            return self._grpc_submit(list(command), cpu, mem, tasks, retries, log_max)
        return self.tcl("submit", *flags, "--", *command).stdout.strip()

    def _grpc_submit(self, command: list[str], cpu: str, mem: str, tasks: int, retries: int | None,
                     log_max: str | None) -> str:
        from tcluster.domain.units import parse_bytes, parse_cpu
        spec = jobs_pb2.JobSpec(command=command, tasks=tasks, retries=retries or 0,
                                log_max_bytes=parse_bytes(log_max, "log_max") if log_max else 0)
        spec.resources.cpu, spec.resources.memory = parse_cpu(cpu, "cpu"), parse_bytes(mem, "mem")
        print("[compat] submitted through gRPC: tcl submit lacks --retries/--log-max")
        return self.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec), timeout=30).id

    @property
    def jobs(self) -> jobs_pb2_grpc.JobServiceStub:
        """A gRPC stub for fast polling and storms (a new channel after a master restart)."""
        if self._channel is None:
            self._channel = grpc.insecure_channel(self.address)
        return jobs_pb2_grpc.JobServiceStub(self._channel)

    def _close_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def wait_job(self, job_id: str, states: set[str], timeout_s: float = 60.0) -> dict:
        def check() -> dict | None:
            job = self.status(job_id)
            return job if job["state"] in states else None
        return wait_for(check, timeout_s, f"job {job_id} in {sorted(states)}", interval_s=0.2)

    def wait_ended(self, job_id: str, timeout_s: float = 60.0) -> dict:
        """The job ended and each of its tasks too (a cancelled job is CANCELLED at once,
        its tasks KILLED when their agent confirms)."""
        def check() -> dict | None:
            job = self.status(job_id)
            return job if job_reached(job, JOB_ENDS) else None
        return wait_for(check, timeout_s, f"job {job_id} and its tasks ended", interval_s=0.2)

    def wait_task(self, job_id: str, predicate: Callable[[dict], bool], what: str, timeout_s: float = 60.0) -> dict:
        """Waits until task 0 of the job satisfies `predicate`; returns the job."""
        def check() -> dict | None:
            job = self.status(job_id)
            return job if job["tasks"] and predicate(job["tasks"][0]) else None
        return wait_for(check, timeout_s, f"job {job_id} task 0 {what}", interval_s=0.2)

    def wait_node(self, name: str, state: str, timeout_s: float = 30.0) -> dict:
        def check() -> dict | None:
            node = self.nodes().get(name)
            return node if node is not None and node["state"] == state else None
        return wait_for(check, timeout_s, f"node {name} {state}", interval_s=0.2)

    # ---- teardown ----

    def close(self) -> list[str]:
        """Stops every process by pid, closes proxies, sweeps the nodes' cgroups; returns
        what was still there before the sweep (a test fails on it when it cares)."""
        for agent in self.agents.values():
            if agent.proc is not None:
                agent.proc.popen.send_signal(signal.SIGCONT)   # a paused agent cannot stop otherwise
                agent.proc.stop()
                agent.proc = None
            if agent.proxy is not None:
                agent.proxy.close()
        if self.master is not None:
            self.kill_master(signal.SIGTERM)
        self._close_channel()
        left: list[str] = []
        for name, agent in self.agents.items():
            left += leaked_cgroups(name)
            sweep_node(name, agent.state_dir if agent.state_dir.exists() else None)
        return left

    def log_tail(self, chars: int = 3000) -> str:
        """The end of every process log, for failure messages."""
        parts = []
        for log in sorted(self.tmp.glob("*.log")):
            parts.append(f"--- {log.name}\n{log.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)
