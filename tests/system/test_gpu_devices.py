"""GPUs through the real daemons on real cgroups (v1 here; v2 with its BPF device program
in the tests/vm guest): an agent declares device nodes the test makes with mknod, of a
major no driver has, so an open the task is allowed fails with ENXIO and one it is denied
with EPERM (the file modes allow everyone: EPERM can only be the cgroup's word).

Checked: the node offers `gpu` and labels it; tasks are bound to distinct indices, shown
by `tcl status`; CUDA_VISIBLE_DEVICES (0..n-1, as CUDA numbers them inside),
NVIDIA_VISIBLE_DEVICES and TCL_GPUS (the node's indices); a task opens only its own
devices, one without --gpus none; the devices are free again after an exit, a kill, an
agent restart (rebuilt from the running tasks) and a LOST attempt."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from tcluster.agent.runtime import devbpf
from tcluster.agent.runtime.devices import task_rules
from testkit.cgroups import SKIP_REASON, leftovers
from testkit.patience import patient
from testkit.procs import Proc, start_agent, start_master, sweep_node, tcl_quick as tcl
from tests.system.cluster import job, node_name, nodes, submit, wait_state

# guest (tests/vm reruns it on cgroup v2, where the devices are confined by a BPF program):
# the program on its own and the one daemon test that binds, confines and re-adopts; the
# other daemon tests' logic is the same on v1 and v2, and each costs minutes under emulation.
pytestmark = [pytest.mark.system, pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)]
DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}
DEVICES = 3
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
# Prints its GPU variables and what opening each device gives, then waits for its gate.
PROBE = """
import errno, os, sys, time
d, n, gate = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print("env", *(os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "TCL_GPUS")), flush=True)
for i in range(n):
    try:
        os.close(os.open(f"{d}/gpu{i}", os.O_RDWR))
        result = "OPENED"
    except OSError as e:
        result = errno.errorcode.get(e.errno, str(e.errno))
    print(f"gpu{i}", result, flush=True)
while not os.path.exists(gate):
    time.sleep(0.2)
"""


def free_major() -> int:
    """A character major no driver registered (/proc/devices), from the top of the range."""
    used = set()
    for line in Path("/proc/devices").read_text().split("Block devices:")[0].splitlines():
        parts = line.split()
        if parts and parts[0].isdigit():
            used.add(int(parts[0]))
    return next(m for m in range(3999, 511, -1) if m not in used)


@pytest.fixture
def workdir() -> Iterator[Path]:
    """Device nodes and gates, not under /tmp (tasks get a private one), readable by the
    tasks' user (nobody); removed after."""
    path = Path(tempfile.mkdtemp(prefix="tcl-gpu-", dir="/var/tmp"))
    path.chmod(0o755)
    major = free_major()
    try:
        for i in range(DEVICES):
            os.mknod(path / f"gpu{i}", 0o666 | stat.S_IFCHR, os.makedev(major, i))
            os.chmod(path / f"gpu{i}", 0o666)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def devices_leftovers(node: str) -> list[Path]:
    """The v1 devices hierarchy is not among testkit's task controllers: looked at here."""
    root = Path("/sys/fs/cgroup/devices/tcluster") / node
    return [root] if root.exists() else []


class Gpus:
    def __init__(self, tmp: Path, work: Path, node: str, *master_args: str) -> None:
        self.tmp, self.work, self.node = tmp, work, node
        self.args = ["--cpus", "2", "--memory", "2Gi", "--gpu-devices",
                     ",".join(str(work / f"gpu{i}") for i in range(DEVICES))]
        self.master, self.address = start_master(tmp, *master_args)
        try:
            self.agent = self.start_agent("agent1.log")
        except BaseException:
            self.master.stop()
            raise

    def start_agent(self, log: str) -> Proc:
        return start_agent(self.tmp, self.address, self.node, *self.args, log=log)

    def run(self, name: str, gpus: int) -> str:
        return submit(self.address, "--name", name, "--cpu", "0.1", "--mem", "64Mi", "--gpus", str(gpus), "--",
                      PYTHON, "-c", PROBE, str(self.work), str(DEVICES), str(self.work / f"gate-{name}"))

    def probe(self, job_id: str) -> list[str]:
        """The task's lines once it has tried every device."""
        deadline = time.monotonic() + patient(60)
        while time.monotonic() < deadline:
            out = tcl(self.address, "logs", job_id, check=False).stdout
            if f"gpu{DEVICES - 1} " in out:
                return out.splitlines()
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} printed no probe: {out!r}")

    def gpus_of(self, job_id: str) -> list[int]:
        """The devices of the job's task once the task runs. The job reads RUNNING while its
        task is still STARTING, before the agent's report names the devices (a launch the
        agent refused while a lost attempt's devices were still held is placed again)."""
        deadline = time.monotonic() + patient(120)
        while True:
            task = wait_state(self.address, job_id, {"RUNNING"})["tasks"][0]
            if task["state"] == "RUNNING" or time.monotonic() > deadline:
                assert task["state"] == "RUNNING", f"job {job_id}'s task is {task['state']}: {task}"
                return task["gpus"]
            time.sleep(0.2)

    def open(self, name: str) -> None:
        (self.work / f"gate-{name}").touch()

    def close(self) -> None:
        self.agent.stop()
        self.master.stop()


@contextmanager
def gpu_cluster(tmp: Path, work: Path, *master_args: str) -> Iterator[Gpus]:
    """A master and a GPU agent; whatever they leave is swept, and a test that passed must
    have left nothing (its tasks all ended: the agent removed their groups and its own)."""
    node = node_name("gpu")
    passed = False
    try:
        cluster = Gpus(tmp, work, node, *master_args)
        try:
            yield cluster
            passed = True
        finally:
            cluster.close()
    finally:
        leaked = leftovers(node) + devices_leftovers(node)
        sweep_node(node, tmp / node)
    assert not passed or leaked == [], f"the test left cgroups behind: {leaked}"


def expected(own: list[int]) -> list[str]:
    return [f"gpu{i} {'ENXIO' if i in own else 'EPERM'}" for i in range(DEVICES)]


def test_tasks_are_bound_to_their_own_devices_and_confined_to_them(tmp_path: Path, workdir: Path) -> None:
    with gpu_cluster(tmp_path, workdir) as gpus:
        _bound_and_confined(gpus)


def _bound_and_confined(gpus: Gpus) -> None:
    node = next(n for n in nodes(gpus.address) if n["name"] == gpus.node)
    assert node["capacity"]["gpu"] == DEVICES and node["labels"]["gpu.count"] == str(DEVICES), node

    two, one, none = gpus.run("two", 2), gpus.run("one", 1), gpus.run("none", 0)
    assert gpus.gpus_of(two) == [0, 1] and gpus.gpus_of(one) == [2] and gpus.gpus_of(none) == []
    assert gpus.probe(two) == ["env 0,1 0,1 0,1", *expected([0, 1])]
    assert gpus.probe(one) == ["env 0 2 2", *expected([2])]
    assert gpus.probe(none) == ["env  void ", *expected([])]
    # All three devices are bound: a fourth GPU task waits, and says why.
    waiting = gpus.run("waiting", 1)
    time.sleep(1.0)
    assert job(gpus.address, waiting)["state"] == "PENDING"

    gpus.open("two")                                         # exit: 0 and 1 are free again
    assert wait_state(gpus.address, two, DONE)["state"] == "SUCCEEDED"
    assert gpus.gpus_of(waiting) == [0]
    tcl(gpus.address, "cancel", one)                         # kill: 2 is free again
    wait_state(gpus.address, one, DONE)
    after_kill = gpus.run("after-kill", 2)
    assert sorted(gpus.gpus_of(after_kill)) == [1, 2]
    assert gpus.probe(after_kill) == ["env 0,1 1,2 1,2", *expected([1, 2])]
    for name, job_id in (("none", none), ("waiting", waiting), ("after-kill", after_kill)):
        gpus.open(name)
        wait_state(gpus.address, job_id, DONE)


@pytest.mark.guest
def test_bindings_survive_an_agent_restart(tmp_path: Path, workdir: Path) -> None:
    """The agent is killed while a task holds two devices; restarted, it rebuilds the
    allocation from the running task and hands out only the third."""
    with gpu_cluster(tmp_path, workdir) as gpus:
        held = gpus.run("held", 2)
        assert gpus.gpus_of(held) == [0, 1]
        gpus.agent.stop(signal.SIGKILL)                      # the task keeps running without its agent
        gpus.agent = gpus.start_agent("agent2.log")
        gpus.agent.wait_for_output(r"re-adopted running task \S+ \(GPUs \(0, 1\)\)", 60)
        late = gpus.run("late", 1)
        assert gpus.gpus_of(late) == [2], "a restarted agent must not hand out devices its tasks hold"
        assert gpus.probe(held) == ["env 0,1 0,1 0,1", *expected([0, 1])]
        assert gpus.probe(late) == ["env 0 2 2", *expected([2])]
        for name, job_id in (("held", held), ("late", late)):
            gpus.open(name)
            assert wait_state(gpus.address, job_id, DONE)["state"] == "SUCCEEDED"
        assert job(gpus.address, held)["tasks"][0]["gpus"] == [0, 1]     # the record stays with the attempt
        after = gpus.run("after", 3)                          # the re-adopted task's devices are free again
        assert gpus.gpus_of(after) == [0, 1, 2]
        gpus.open("after")
        wait_state(gpus.address, after, DONE)


def test_a_lost_attempt_frees_its_devices(tmp_path: Path, workdir: Path) -> None:
    """The agent is away past the master's timeouts (short here): its task is LOST. When the
    agent is back, the master has it kill the lost attempt, and its devices are free again."""
    with gpu_cluster(tmp_path, workdir, "--node-timeout-s", "2", "--lost-timeout-s", "1") as gpus:
        held = gpus.run("held", 2)
        assert gpus.gpus_of(held) == [0, 1]
        gpus.agent.stop(signal.SIGKILL)
        deadline = time.monotonic() + 60
        while job(gpus.address, held)["tasks"][0]["state"] != "LOST" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert job(gpus.address, held)["tasks"][0]["state"] == "LOST"
        gpus.agent = gpus.start_agent("agent2.log")
        again = gpus.run("again", 3)
        assert gpus.gpus_of(again) == [0, 1, 2]
        assert gpus.probe(again) == ["env 0,1,2 0,1,2 0,1,2", *expected([0, 1, 2])]
        gpus.open("again")
        wait_state(gpus.address, again, DONE)


def cgroup2_mount() -> Path | None:
    """The cgroup2 mount (on this hybrid host /sys/fs/cgroup/unified: device programs work
    there whatever controllers it has; in the tests/vm guest /sys/fs/cgroup)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        head, _, tail = line.partition(" - ")
        if tail.split()[:1] == ["cgroup2"]:
            return Path(head.split()[4])
    return None


@pytest.mark.guest
def test_the_bpf_device_program_allows_only_its_rules(workdir: Path) -> None:
    """devbpf on its own, on whatever cgroup2 mount this host has: a child process in a
    group with the program opens its own device (ENXIO: no driver) and /dev/null, and gets
    EPERM for another device."""
    mount = cgroup2_mount()
    if mount is None or not os.access(mount, os.W_OK):
        pytest.skip("no writable cgroup2 mount")
    own = os.stat(workdir / "gpu1").st_rdev
    group = mount / f"tcl-gpu-test-{os.getpid()}"
    group.mkdir()
    try:
        devbpf.attach(str(group), task_rules([(os.major(own), os.minor(own))]))
        code = ("import errno, os, sys\nfor p in sys.argv[1:]:\n    try:\n        os.close(os.open(p, os.O_RDWR))\n"
                "        print(p, 'OPENED')\n    except OSError as e:\n        print(p, errno.errorcode[e.errno])\n")
        paths = [str(workdir / f"gpu{i}") for i in range(DEVICES)] + ["/dev/null"]
        enter = f"echo $$ > {group}/cgroup.procs && exec {sys.executable} -c \"$0\" \"$@\""
        out = subprocess.run(["sh", "-c", enter, code, *paths], capture_output=True, text=True, check=True).stdout
        assert out.splitlines() == [f"{paths[0]} EPERM", f"{paths[1]} ENXIO", f"{paths[2]} EPERM",
                                    "/dev/null OPENED"]
    finally:
        for _ in range(50):            # the child has exited; the group empties right after
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.05)
