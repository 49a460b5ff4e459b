"""Users through the real binaries: `tcl-master init`, a joined agent with the cgroup
runtime, two users with different grants logged in with `tcl login`, each job's processes
under its owner's Unix uid (read from /proc by pid), logs and cancel owner-only.

The two Unix users are made here with useradd (uid >= 1000) and removed at the end."""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from testkit.procs import BIN, Proc, cgroup_v1_usable, node_subtrees, sweep_node

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
QUEUES = "queues:\n  ads: {queues: {prod: {}, test: {}}}\n  eng: {queues: {ml: {max_job_weight: 3}}}\n"
DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}


@pytest.fixture
def unix_users() -> Iterator[list[str]]:
    """Two fresh Unix users (no home, no login), deleted afterwards."""
    if os.geteuid() != 0 or not Path("/usr/sbin/useradd").exists():
        pytest.skip("needs root and useradd to make Unix users")
    tag = f"{os.getpid() % 100000}{uuid.uuid4().hex[:4]}"
    names = [f"tcla{tag}", f"tclb{tag}"]
    made: list[str] = []
    try:
        for name in names:
            subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "-K", "UID_MIN=20000",
                            "-K", "UID_MAX=29999", name], check=True, capture_output=True, timeout=30)
            made.append(name)
        assert all(pwd.getpwnam(n).pw_uid >= 1000 for n in names)
        yield names
    finally:
        for name in made:
            subprocess.run(["userdel", name], capture_output=True, timeout=30)


class User:
    """`tcl` as one person: their own config dir (credentials file) and nothing else."""

    def __init__(self, master: str, config: Path) -> None:
        self.master, self.env = master, {**os.environ, "XDG_CONFIG_HOME": str(config)}
        self.env.pop("TCL_TOKEN", None)

    def tcl(self, *args: str, stdin: str = "", check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(BIN / "tcl"), *args], input=stdin, capture_output=True, text=True,
                                env=self.env, timeout=60, cwd="/")     # "/": a directory every task user enters
        if check and result.returncode != 0:
            raise AssertionError(f"tcl {' '.join(args)} exited {result.returncode}: {result.stderr}")
        return result

    def state(self, job_id: str) -> str:
        return re.search(r"State:\s+(\w+)", self.tcl("status", job_id).stdout).group(1)  # type: ignore[union-attr]

    def wait(self, job_id: str, states: set[str], timeout_s: float = 60) -> str:
        deadline = time.monotonic() + timeout_s
        while (state := self.state(job_id)) not in states:
            assert time.monotonic() < deadline, f"job {job_id} stayed {state}"
            time.sleep(0.1)
        return state


def master_cmd(*args: str) -> str:
    result = subprocess.run([str(BIN / "tcl-master"), *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def task_uids(node: str, command: str) -> set[int]:
    """Real uids of the node's task processes named `command`, from /proc, by pid."""
    uids = set()
    for subtree in node_subtrees(node):
        for procs in subtree.rglob("cgroup.procs"):
            for pid in procs.read_text().split():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue        # it ended meanwhile
                if re.search(rf"^Name:\s+{command}$", status, re.M):
                    uids.add(int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1)))  # type: ignore[union-attr]
    return uids


def test_two_users_jobs_run_as_their_owners_and_stay_theirs(tmp_path: Path, unix_users: list[str]) -> None:
    data = tmp_path / "master"
    admin_token = re.search(r"^\s+(tcu\.\S+)$", master_cmd("init", "--data-dir", str(data)), re.M).group(1)  # type: ignore[union-attr]
    (tmp_path / "q.yaml").write_text(QUEUES)
    master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(data), "--queues",
                   str(tmp_path / "q.yaml"), "--heartbeat-interval-s", "0.5", "--http", "off"], tmp_path / "master.log")
    node = f"e2e-users-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    agent = None
    try:
        address = "127.0.0.1:" + master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)").group(1)
        join = master_cmd("join-token", "create", "--data-dir", str(data)).strip()
        subprocess.run([str(BIN / "tcl-agent"), "join", "--master", address, "--token", join, "--node", node,
                        "--state-dir", str(tmp_path / node)], check=True, capture_output=True, timeout=60)
        agent = Proc([str(BIN / "tcl-agent"), "--state-dir", str(tmp_path / node), "--runtime", "cgroup1",
                      "--cpus", "2", "--memory", "2Gi", "--heartbeat-interval-s", "0.5"], tmp_path / "agent.log")
        agent.wait_for_output(r"registered with")
        ua, ub = unix_users
        tokens = [master_cmd("user", "add", "alice", "--unix-user", ua, "--queues", "ads.*", "--data-dir", str(data)),
                  master_cmd("user", "add", "bob", "--unix-user", ub, "--queues", "eng", "--data-dir", str(data))]
        alice, bob, admin = (User(address, tmp_path / n) for n in ("alice", "bob", "admin"))
        for person, token in ((alice, tokens[0]), (bob, tokens[1]), (admin, admin_token)):
            person.tcl("login", "--master", address, stdin=token)     # the token from stdin
        assert "alice on" in alice.tcl("whoami").stdout
        _check_flows(alice, bob, admin, node, (ua, ub))
    finally:
        if agent is not None:
            agent.stop()
        master.stop()
        sweep_node(node, tmp_path / node)


def _check_flows(alice: User, bob: User, admin: User, node: str, unix: tuple[str, str]) -> None:
    sleep = ("--cpu", "0.1", "--mem", "64Mi", "--", "sleep", "300")
    a = alice.tcl("submit", "--queue", "ads.prod", "--env", "AWS_SECRET_ACCESS_KEY=alice-very-secret",
                  *sleep).stdout.strip()
    b = bob.tcl("submit", "--queue", "eng.ml", "--weight", "3", *sleep).stdout.strip()
    alice.wait(a, {"RUNNING"})
    bob.wait(b, {"RUNNING"})
    uids = {pwd.getpwnam(u).pw_uid for u in unix}
    deadline = time.monotonic() + 30
    while task_uids(node, "sleep") != uids:
        assert time.monotonic() < deadline, (task_uids(node, "sleep"), uids)
        time.sleep(0.1)
    # refusals: exit 1 with the master's reason
    refusals = [
        (bob, ("logs", a), f"permission denied: user bob may not read the logs of job {a}: it belongs to alice"),
        (bob, ("cancel", a), f"permission denied: user bob may not cancel job {a}: it belongs to alice"),
        (bob, ("submit", "--queue", "ads.prod", "--", "true"),
         "permission denied: user bob may not submit to queue ads.prod: their grants are eng"),
        (alice, ("submit", "--queue", "ads.prod", "--user", "root", "--", "true"), "only admins may choose --user"),
        (alice, ("submit", "--queue", "ads.prod", "--weight", "2", "--", "true"), "its max_job_weight is 1"),
    ]
    for person, args, message in refusals:
        result = person.tcl(*args, check=False)
        assert result.returncode == 1 and message in result.stderr, (args, result.stderr)
    # a job's env values go to its owner and admins only; others see the keys (the review's #5)
    for person, value in ((bob, "<redacted>"), (alice, "alice-very-secret"), (admin, "alice-very-secret")):
        shown = json.loads(person.tcl("status", a, "-o", "json").stdout)
        env = shown["env"]
        assert env["AWS_SECRET_ACCESS_KEY"] == value and shown["owner"] == "alice"
        # exported from alice's shell (--export ALL, issue 34): as much hers as --env's
        assert env["PATH"] == (value if value == "<redacted>" else os.environ["PATH"])
    nobody = User(alice.master, Path("/nonexistent-tcl-config"))
    result = nobody.tcl("jobs", "--master", alice.master, check=False)
    assert result.returncode == 1, result.stderr       # no credentials: no TLS, no token
    # the owner (and an admin) may
    assert alice.tcl("cancel", a).stdout.strip() == "CANCELLED"
    assert admin.tcl("cancel", b).stdout.strip() == "CANCELLED"
    done = alice.tcl("submit", "--queue", "ads.test", "--wait", "--", "sh", "-c", "id -u").stdout.split()[0]
    assert alice.tcl("logs", done).stdout.strip() == str(pwd.getpwnam(unix[0]).pw_uid)
    listed = bob.tcl("jobs", "--owner", "alice", "-o", "json").stdout
    assert a in listed and b not in listed
