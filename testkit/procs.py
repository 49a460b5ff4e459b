"""Start the real binaries from the venv and stop them by pid; nothing else is touched."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Callable, Iterator
from pathlib import Path

from testkit.patience import TIME_SCALE, patient

BIN = Path(sys.executable).parent
STOP_WAIT_S = 15.0


def cgroup_v1_usable() -> str | None:
    """None when this host can run the cgroup1 runtime, else why not."""
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    for controller in ("cpu", "cpuacct", "memory", "pids", "freezer"):
        if not os.access(f"/sys/fs/cgroup/{controller}", os.W_OK) or not os.path.exists(f"/sys/fs/cgroup/{controller}/cgroup.procs"):
            return f"no writable cgroup v1 '{controller}' hierarchy on this host"
    return None


# A serving `tcl-master` that a test starts gets `--http off` unless the test names its own
# `--http`: starting the dashboard (importing aiohttp, which reads the system's CA bundle twice
# at import) is about half of a master's start, and most tests never read it. The tests of the
# dashboard, metrics and the README's default flow pass `--http` and get it.
DASHBOARD_OFF = ("--http", "off")


def without_unasked_dashboard(args: list[str]) -> list[str]:
    """args, with DASHBOARD_OFF added for a serving tcl-master (its first argument a flag, not
    a subcommand such as `init`) whose args name no --http (nor a --config, which may)."""
    serving = Path(args[0]).name == "tcl-master" and (len(args) == 1 or args[1].startswith("-"))
    named = any(a in ("--http", "--config") or a.startswith(("--http=", "--config=")) for a in args)
    return [*args, *DASHBOARD_OFF] if serving and not named else args


class Proc:
    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        args = without_unasked_dashboard(args)
        self.log = log
        self.handle = open(log, "wb")
        self.popen = subprocess.Popen(args, stdout=self.handle, stderr=subprocess.STDOUT,
                                      env={**os.environ, **(env or {})}, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_output(self, pattern: str, timeout_s: float = 30.0) -> re.Match[str]:
        timeout_s = patient(timeout_s)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            match = re.search(pattern, self.output())
            if match:
                return match
            if self.popen.poll() is not None:
                raise AssertionError(f"{self.popen.args[0]} exited {self.popen.returncode}:\n{self.output()}")
            time.sleep(0.05)
        raise AssertionError(f"no {pattern!r} within {timeout_s}s:\n{self.output()}")

    def stop(self, signum: int = signal.SIGTERM) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signum)
            try:
                self.popen.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(STOP_WAIT_S)
        self.handle.close()
        return self.popen.returncode


def closed_port() -> str:
    """A loopback address nothing listens on: a connection to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


@contextlib.contextmanager
def gate_dir() -> Iterator[Path]:
    """A folder for files the test creates to let a task end at a chosen moment, at any machine
    speed. Not under /tmp (tasks get a private one) and readable by the tasks' user (nobody)."""
    path = Path(tempfile.mkdtemp(prefix="tcl-gates-", dir="/var/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def gated(gate: Path, then: str) -> list[str]:
    """A task's command: wait for `gate` to exist, then run `then` in sh."""
    # Half a second between looks: a task ends at most that long after its gate opens, and
    # the loop's fork-exec of `sleep` does not eat the CPU that the agent and `tcl` need
    # under software emulation (tests/vm), as 20 of them a second per task did.
    return ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.5; done; {then}"]


def patient_master_args() -> list[str]:
    """On a slow machine (patience.py) a restarted agent may take longer to come back than
    the master's defaults allow before its node is DOWN (15 s) and its tasks LOST (30 s
    more): both stretched there; on the host, nothing (the test's own flags come after)."""
    if TIME_SCALE == 1:
        return []
    return ["--node-timeout-s", str(patient(15.0)), "--lost-timeout-s", str(patient(30.0))]


def start_master(tmp: Path, *extra: str, heartbeat_s: float = 0.5, log: str = "master.log") -> tuple[Proc, str]:
    """`tcl-master` on a free loopback port with its data under tmp/master: (process, address)."""
    master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(tmp / "master"),
                   "--heartbeat-interval-s", str(heartbeat_s), *patient_master_args(), *extra], tmp / log)
    try:
        port = master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)", 60).group(1)
    except BaseException:
        master.stop()
        raise
    return master, f"127.0.0.1:{port}"


def start_agent(tmp: Path, master: str, node: str, *extra: str, log: str = "") -> Proc:
    """`tcl-agent` for `node` with its state under tmp/node, once it has registered."""
    agent = Proc([str(BIN / "tcl-agent"), "--master", master, "--node", node, "--state-dir", str(tmp / node),
                  *extra], tmp / (log or f"{node}.log"))
    try:
        agent.wait_for_output(r"registered with", 60)
    except BaseException:
        agent.stop()
        raise
    return agent


# tcl's directory is its jobs' default working directory: "/", which every node and every
# task user can enter wherever the checkout lives (a test that needs another passes cwd).
TCL_CWD = "/"


def tcl(master: str, *args: str, check: bool = True, timeout_s: float = 60,
        cwd: str = TCL_CWD) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(BIN / "tcl"), "--master", master, *args], capture_output=True, text=True,
                            timeout=patient(timeout_s), cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"tcl {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def tcl_json(master: str, *args: str) -> object:
    return json.loads(tcl(master, *args, "-o", "json").stdout)


JOB_ENDS = {"SUCCEEDED", "FAILED", "CANCELLED"}
TASK_ENDS = {"SUCCEEDED", "FAILED", "KILLED", "LOST"}


def job_reached(found: dict, states: set[str]) -> bool:
    """The job (`tcl status -o json`) in one of `states`. Waiting for its end also waits for
    its tasks' (a cancelled job is CANCELLED at once, its tasks KILLED when their agent
    confirms); a RUNNING job is one with no task still STARTING (a job is RUNNING from its
    first placement, while the agent still makes the task's cgroups)."""
    if found["state"] not in states:
        return False
    if found["state"] == "RUNNING":
        return all(t["state"] != "STARTING" for t in found["tasks"])
    return not states <= JOB_ENDS or all(t["state"] in TASK_ENDS for t in found["tasks"])


def tcl_quick(master: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`tcl` run in this process (testkit/inproc.py), for tests whose subject is not the CLI."""
    from testkit.inproc import tcl_in_process
    result = tcl_in_process(master, *args)
    if check and result.returncode != 0:
        raise AssertionError(f"tcl {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def tcl_quick_json(master: str, *args: str) -> object:
    return json.loads(tcl_quick(master, *args, "-o", "json").stdout)


# `tcl`'s answer when a call outlived its deadline (cli/client.py): a slow master, not a wrong one.
SLOW_ANSWER = "did not answer within"


def polled_status(master: str, job_id: str) -> dict | None:
    """`tcl status JOB -o json` for a waiting loop, or None when the master answered too late
    for the call's 10 s deadline: under emulation beside a CPU hog (tests/vm, a loaded CI
    host) one poll can; the loop's own deadline is what the test means, so it polls again.
    Any other failure fails the test."""
    from testkit.inproc import tcl_in_process
    result = tcl_in_process(master, "status", job_id, "-o", "json")
    if result.returncode != 0 and SLOW_ANSWER in result.stderr:
        print(f"polled_status: {result.stderr.strip()}; polling again", flush=True)
        return None
    if result.returncode != 0:
        raise AssertionError(f"tcl status {job_id} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    found = json.loads(result.stdout)
    assert isinstance(found, dict)
    return found


def wait_job(master: str, job_id: str, states: set[str], timeout_s: float = 60.0) -> dict:
    """The job once in one of `states`. Polled with `tcl` in this process: a waiting loop is
    not the CLI under test, and a binary's start per poll (a third of a core-second) would
    load the daemons under test far more than they load themselves."""
    timeout_s = patient(timeout_s)
    deadline = time.monotonic() + timeout_s
    job = None
    while time.monotonic() < deadline:
        job = polled_status(master, job_id)
        if job is not None and job["state"] in states:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} not in {states} within {timeout_s}s: {job}")


def node_subtrees(node: str) -> list[Path]:
    """tcluster/<node> in every v1 hierarchy, and at the root of a cgroup v2 mount."""
    root = Path("/sys/fs/cgroup")
    candidates = [h / "tcluster" / node for h in root.iterdir()] + [root / "tcluster" / node]
    return [p for p in candidates if p.is_dir()]


def leaked_cgroups(node: str) -> list[str]:
    return [str(p) for base in node_subtrees(node) for p in base.iterdir() if p.is_dir()]


def sweep_node(node: str, state_dir: Path | None = None) -> None:
    """Removes whatever a node's agent left (tasks outlive a stopped agent by design),
    through the runtime's own kill-and-remove path."""
    from tcluster.agent.runtime import make_runtime
    with tempfile.TemporaryDirectory() as scratch:
        runtime = make_runtime("auto", node, state_dir or Path(scratch))
        for key in runtime.containers():
            runtime.remove(key)
        runtime.close()


def sweep_nodes_of_this_run(marker: str) -> list[str]:
    """Sweeps every node subtree whose name holds `marker` (tests put their pid in node
    names, so only this run's nodes match). Returns the names swept."""
    roots = [Path("/sys/fs/cgroup/tcluster")] + list(Path("/sys/fs/cgroup").glob("*/tcluster"))
    names = sorted({p.name for root in roots if root.is_dir() for p in root.iterdir()
                    if p.is_dir() and marker in p.name})
    for name in names:
        sweep_node(name)
    return names


def wait_until(check: Callable[[], bool], timeout_s: float, interval_s: float = 0.2) -> float:
    """Seconds until `check()` held; AssertionError past `timeout_s` (stretched: patience.py)."""
    timeout_s = patient(timeout_s)
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"not within {timeout_s}s")
        time.sleep(interval_s)
    return time.monotonic() - started


def cancel_every_job(master: str, timeout_s: float = 60.0) -> None:
    """Cancels what still runs and waits for its tasks to end: an agent leaves its tasks
    running when it stops, so a test cancels them before stopping its agents."""
    jobs = tcl_json(master, "jobs", "--all", "--all-users")
    listed = jobs if isinstance(jobs, list) else []
    for job in listed:
        if job["state"] in ("PENDING", "RUNNING"):
            tcl(master, "cancel", job["id"], check=False)
    for job in listed:    # CANCELLED at once; its tasks end after their grace (polled in-process)
        wait_until(lambda: all(t["finished_at"] for t in tcl_quick_json(master, "status", job["id"])["tasks"]),  # type: ignore[index]
                   timeout_s)


class OneNodeCluster:
    """`tcl-master` (with `master_flags`) and one agent on cgroup v1, from the installed binaries,
    as the e2e tests use them: restart the master in place, stop everything and check no cgroup
    is left."""

    def __init__(self, tmp: Path, tag: str, master_flags: list[str], *agent_args: str) -> None:
        self.tmp, self.node = tmp, f"e2e-{tag}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.flags = [*master_flags, "--data-dir", str(tmp / "master")]
        self.master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", *self.flags], tmp / "master.log")
        self.address = "127.0.0.1:" + self.master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)").group(1)
        self.agent = Proc([str(BIN / "tcl-agent"), "--master", self.address, "--node", self.node, "--runtime",
                           "cgroup1", *agent_args, "--state-dir", str(tmp / "agent")], tmp / "agent.log")
        self.agent.wait_for_output(r"registered with")
        self.restarts = 0

    def restart_master(self) -> None:
        """kill -9 the master and start it again on the same address and data."""
        self.master.stop(signal.SIGKILL)
        self.restarts += 1
        self.master = Proc([str(BIN / "tcl-master"), "--listen", self.address, *self.flags],
                           self.tmp / f"master{self.restarts + 1}.log")
        self.master.wait_for_output(r"listening on")

    def stop(self) -> None:
        try:
            cancel_every_job(self.address)
        finally:
            self.agent.stop()
            self.master.stop()
        assert leaked_cgroups(self.node) == []
