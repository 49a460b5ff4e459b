"""`tcl exec` and `tcl run` through the binaries, on a secure master with two users (made here
with useradd) and one cgroup v1 agent: the exec'd command is in the task's cgroup and PID
namespace, runs as the task's user, and gives tcl its exit code; another user is refused;
a task that is not running is refused naming its state; a client that vanishes, the task's
end, and an agent or master restart leave no process behind; `tcl run -it` driven through a
pty; a client that stops reading keeps the master's memory bounded."""

from __future__ import annotations

import os
import pty
import pwd
import re
import select
import struct
import termios
import fcntl
import json
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from testkit.procs import BIN, Proc, cgroup_v1_usable, node_subtrees, sweep_node
from tests.e2e.test_users import User, master_cmd

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
QUEUES = "queues:\n  ads: {queues: {prod: {}}}\n  eng: {}\n"
SLEEP = ("--queue", "ads.prod", "--cpu", "0.1", "--mem", "64Mi", "--", "sleep", "600")
MiB = 2**20


@dataclass
class Cluster:
    tmp: Path
    node: str
    address: str
    master: Proc
    agent: Proc
    alice: User
    bob: User
    alice_uid: int
    data: Path
    agent_port: str

    def restart_agent(self) -> None:
        self.agent.stop(signal.SIGKILL)
        self.agent = Proc(self.agent.popen.args, self.tmp / f"agent-{time.monotonic_ns()}.log")  # type: ignore[arg-type]
        self.agent.wait_for_output(r"registered with")

    def restart_master(self) -> None:
        self.master.stop(signal.SIGKILL)
        self.master = Proc([str(BIN / "tcl-master"), "--listen", self.address, "--agent-listen",
                            f"127.0.0.1:{self.agent_port}", "--data-dir", str(self.data),
                            "--queues", str(self.tmp / "q.yaml"), "--heartbeat-interval-s", "0.5", "--http", "off"],
                           self.tmp / f"master-{time.monotonic_ns()}.log")
        self.master.wait_for_output(r"listening on")


def _unix_users() -> list[str]:
    tag = f"{os.getpid() % 100000}{uuid.uuid4().hex[:4]}"
    names = [f"tcxa{tag}", f"tcxb{tag}"]
    for name in names:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "-K", "UID_MIN=20000",
                        "-K", "UID_MAX=29999", name], check=True, capture_output=True, timeout=30)
    return names


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if os.geteuid() != 0 or not Path("/usr/sbin/useradd").exists():
        pytest.skip("needs root and useradd to make Unix users")
    tmp = tmp_path_factory.mktemp("exec")
    data = tmp / "master"
    admin_token = re.search(r"^\s+(tcu\.\S+)$", master_cmd("init", "--data-dir", str(data)), re.M).group(1)  # type: ignore[union-attr]
    (tmp / "q.yaml").write_text(QUEUES)
    unix = _unix_users()
    master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(data), "--queues",
                   str(tmp / "q.yaml"), "--heartbeat-interval-s", "0.5", "--http", "off"], tmp / "master.log")
    node = f"e2e-exec-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    agent = None
    try:
        found = master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+) \(TLS\), agents on port (\d+)")
        address, agent_port = "127.0.0.1:" + found.group(1), found.group(2)
        join = master_cmd("join-token", "create", "--data-dir", str(data)).strip()
        subprocess.run([str(BIN / "tcl-agent"), "join", "--master", address, "--token", join, "--node", node,
                        "--state-dir", str(tmp / node)], check=True, capture_output=True, timeout=60)
        agent = Proc([str(BIN / "tcl-agent"), "--state-dir", str(tmp / node), "--runtime", "cgroup1",
                      "--cpus", "2", "--memory", "2Gi", "--heartbeat-interval-s", "0.5"], tmp / "agent.log")
        agent.wait_for_output(r"registered with")
        tokens = [master_cmd("user", "add", "alice", "--unix-user", unix[0], "--queues", "ads.*", "--data-dir", str(data)),
                  master_cmd("user", "add", "bob", "--unix-user", unix[1], "--queues", "eng", "--data-dir", str(data))]
        alice, bob = User(address, tmp / "alice"), User(address, tmp / "bob")
        for person, token in ((alice, tokens[0]), (bob, tokens[1])):
            person.tcl("login", "--master", address, stdin=token)
        assert admin_token
        c = Cluster(tmp, node, address, master, agent, alice, bob, pwd.getpwnam(unix[0]).pw_uid, data, agent_port)
        yield c
        agent = c.agent
        master = c.master
    finally:
        if agent is not None:
            agent.stop()
        master.stop()
        sweep_node(node, tmp / node)
        for name in unix:
            subprocess.run(["userdel", name], capture_output=True, timeout=30)


def _running_job(c: Cluster) -> str:
    job = c.alice.tcl("submit", *SLEEP).stdout.strip()
    c.alice.wait(job, {"RUNNING"})
    return job


def _node_pids(c: Cluster, needle: str) -> list[int]:
    """Host pids in the node's task cgroups whose command line holds `needle`."""
    pids = set()
    for subtree in node_subtrees(c.node):
        for procs in subtree.rglob("cgroup.procs"):
            for pid in procs.read_text().split():
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                if needle in cmdline:
                    pids.add(int(pid))
    return sorted(pids)


def _wait(what: str, check: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _exec_bg(c: Cluster, job: str, *command: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(BIN / "tcl"), "exec", job, "--", *command], env=c.alice.env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def test_exec_runs_in_the_task_as_its_user_with_its_exit_code_and_others_are_refused(cluster: Cluster) -> None:
    job = _running_job(cluster)
    got = cluster.alice.tcl("exec", job, "--", "sh", "-c",
                            "cat /proc/self/cgroup; echo ---; cat /proc/1/cgroup; echo ---; id -u; pwd; "
                            "echo to-stderr >&2; exit 7", check=False)
    assert got.returncode == 7, got.stderr
    mine, init, rest = got.stdout.split("---\n")
    assert mine == init and f"/tcluster/{cluster.node}/{job}.0." in mine     # the task's cgroups, PID 1 its init
    assert rest.split() == [str(cluster.alice_uid), "/"]        # its user and working directory (tcl ran in /)
    assert got.stderr == "to-stderr\n"
    echoed = cluster.alice.tcl("exec", "-i", f"{job}.0", "--", "wc", "-c", stdin="x" * 300_000)
    assert echoed.stdout.strip() == "300000"                                 # stdin through the window
    refused = cluster.bob.tcl("exec", job, "--", "true", check=False)
    assert refused.returncode == 1
    assert f"permission denied: user bob may not exec into task {job}.0 of job {job}: it belongs to alice" \
        in refused.stderr
    missing = cluster.alice.tcl("exec", job, "--", "no-such-command-here", check=False)
    assert missing.returncode == 127 and "not found in the task's PATH" in missing.stderr
    cluster.alice.tcl("cancel", job)
    cluster.alice.wait(job, {"CANCELLED"})
    ended = cluster.alice.tcl("exec", job, "--", "true", check=False)
    assert ended.returncode == 1 and f"task {job}.0 is KILLED: exec runs a command inside a RUNNING task only" \
        in ended.stderr, ended.stderr


def test_nothing_is_left_when_the_client_goes_or_the_task_ends(cluster: Cluster) -> None:
    job = _running_job(cluster)
    client = _exec_bg(cluster, job, "sleep", "1001")
    _wait("the exec'd sleep runs in the task's cgroup", lambda: _node_pids(cluster, "sleep 1001"))
    os.killpg(client.pid, signal.SIGKILL)             # the client vanishes
    client.wait()
    _wait("the exec'd sleep is killed once its client is gone", lambda: not _node_pids(cluster, "sleep 1001"))
    client = _exec_bg(cluster, job, "sh", "-c", "sleep 1002 & sleep 1003")
    _wait("both exec'd sleeps run", lambda: _node_pids(cluster, "sleep 1002") and _node_pids(cluster, "sleep 1003"))
    cluster.alice.tcl("cancel", job)                  # the task ends: its PID namespace and cgroup with it
    out, err = client.communicate(timeout=60)
    # the task's SIGTERM (cancel signals every process of the container), or its end's SIGKILL
    assert client.returncode in (128 + signal.SIGTERM, 128 + signal.SIGKILL), (client.returncode, err)
    _wait("no exec'd process outlives the task",
          lambda: not _node_pids(cluster, "sleep 1002") and not _node_pids(cluster, "sleep 1003"))


def test_an_agent_or_master_restart_ends_the_exec_with_an_error_and_kills_it(cluster: Cluster) -> None:
    job = _running_job(cluster)
    for restart, needle in ((cluster.restart_agent, "sleep 1004"), (cluster.restart_master, "sleep 1005")):
        client = _exec_bg(cluster, job, "sleep", needle.split()[1])
        _wait("the exec'd sleep runs", lambda: _node_pids(cluster, needle))
        restart()
        out, err = client.communicate(timeout=90)
        assert client.returncode == 1 and err.strip(), (client.returncode, err)
        _wait(f"no orphan after {restart.__name__}", lambda: not _node_pids(cluster, needle))
    cluster.alice.wait(job, {"RUNNING"})              # the task itself lives on
    cluster.alice.tcl("cancel", job)


def _pty_run(c: Cluster, args: list[str], script: bytes, timeout_s: float = 90) -> tuple[int, bytes]:
    pid, fd = pty.fork()
    if pid == 0:                                    # the child: tcl on a terminal
        os.chdir("/")                               # the task starts where tcl ran: "/" every task user enters
        os.execve(str(BIN / "tcl"), [str(BIN / "tcl"), *args], c.alice.env)
    out, sent = b"", False
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            if not sent and b"$ " in out:           # the remote shell's prompt: resize, then type into it
                fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))   # tcl gets SIGWINCH
                time.sleep(1)
                os.write(fd, script)
                sent = True
        done, status = os.waitpid(pid, os.WNOHANG)
        for _ in range(100):                      # its output ended: it exits now
            if done:
                break
            time.sleep(0.1)
            done, status = os.waitpid(pid, os.WNOHANG)
        if not done:
            os.kill(pid, signal.SIGTERM)
            _, status = os.waitpid(pid, 0)
            raise AssertionError(f"tcl run still running after {timeout_s} s:\n{out.decode(errors='replace')}")
        return os.waitstatus_to_exitcode(status), out
    finally:
        os.close(fd)


def test_tcl_run_with_a_tty(cluster: Cluster) -> None:
    code, out = _pty_run(cluster, ["run", "-it", "--queue", "ads.prod", "--cpu", "0.1", "--mem", "64Mi", "--",
                                   "sh", "-i"],
                         b"tty; stty size; echo answer=$((6*7)); id -u; exit 3\n")
    text = out.decode(errors="replace")
    assert code == 3, text
    assert "/dev/pts/" in text and "answer=42" in text and str(cluster.alice_uid) in text, text
    assert "33 101" in text, text                                     # the window size followed the resize
    job = re.search(r"tcl run: job (\w+) submitted", text).group(1)  # type: ignore[union-attr]
    assert cluster.alice.state(job) == "FAILED"                       # the task ended as the command did


def test_tcl_run_without_a_tty_relays_and_ctrl_c_cancels(cluster: Cluster) -> None:
    done = cluster.alice.tcl("run", "--queue", "ads.prod", "--cpu", "0.1", "--mem", "64Mi", "--",
                             "sh", "-c", "echo out-$TCL_TASK_INDEX; echo err >&2; exit 4", check=False)
    assert done.returncode == 4 and done.stdout == "out-0\n", (done.stdout, done.stderr)
    assert "tcl run: job" in done.stderr and "RUNNING" in done.stderr and "err\n" in done.stderr
    ran = re.search(r"tcl run: job (\w+) submitted", done.stderr).group(1)  # type: ignore[union-attr]
    shown = json.loads(cluster.alice.tcl("status", ran, "-o", "json").stdout)
    human = cluster.alice.tcl("status", ran).stdout
    assert shown["command"] == ["sh", "-c", "echo out-$TCL_TASK_INDEX; echo err >&2; exit 4"], shown
    assert "echo out-" in human and "i=0" not in human, human          # the user's command, not the placeholder
    client = subprocess.Popen([str(BIN / "tcl"), "run", "--queue", "ads.prod", "--cpu", "0.1", "--mem", "64Mi",
                               "--", "sleep", "1007"], env=cluster.alice.env, text=True, cwd="/",
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait("tcl run's command runs", lambda: _node_pids(cluster, "sleep 1007"))
    client.send_signal(signal.SIGINT)                 # Ctrl-C
    out, err = client.communicate(timeout=60)
    assert client.returncode == 130, err
    job = re.search(r"tcl run: job (\w+) submitted", err).group(1)  # type: ignore[union-attr]
    assert cluster.alice.wait(job, {"CANCELLED"}) == "CANCELLED"
    _wait("nothing of the cancelled run is left", lambda: not _node_pids(cluster, "sleep 1007"))


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def test_a_stalled_exec_client_keeps_the_master_bounded(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command writes as fast as it can; the client reads one message and stops. For 15 s
    the master's RSS grows by less than 32 MiB (window 8 x 64 KiB; unbounded it would hold
    everything `yes` wrote), then the client goes and the command is killed."""
    from tcluster.cli.client import MasterClient
    from tcluster.v1 import jobs_pb2
    job = _running_job(cluster)
    # alice's login, for this test only: monkeypatch puts the suite's own directory back (a
    # pop here once left the rest of the run reading ~/.config, whose stale logins sent later
    # tests TLS to plaintext masters that reused a port)
    monkeypatch.setenv("XDG_CONFIG_HOME", cluster.alice.env["XDG_CONFIG_HOME"])
    with MasterClient(cluster.address) as client:
        opened = jobs_pb2.ExecOpen(job_id=job, command=["sh", "-c", "exec yes 1006-stalled-writer"])
        call, first = client.exec_stream([jobs_pb2.ExecRequest(open=opened)])
        assert first is not None and first.WhichOneof("kind") in ("started", "stdout")
        pid = cluster.master.popen.pid
        before, top = rss(pid), 0
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            top = max(top, rss(pid))
            time.sleep(0.5)
        print(f"master RSS grew {(top - before) / MiB:.1f} MiB in 15 s with a stalled exec client")
        assert top - before < 32 * MiB
        assert _node_pids(cluster, "1006-stalled-writer")      # blocked on its pipe, not gone
        call.cancel()
        with pytest.raises(grpc.RpcError):
            next(call)
    _wait("the stalled exec is killed once its client leaves", lambda: not _node_pids(cluster, "1006-stalled"))
    cluster.alice.tcl("cancel", job)
