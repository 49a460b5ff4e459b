"""Images and task networks through the real binaries (README "Images and networks"):
`tcl-master`, `tcl-agent` with the cgroup runtime on this host, and `tcl`.

- An image job waits while no node has docker (`tcl status` names `tcluster.io/docker`),
  then runs on an agent started with `--docker-host` against a private dockerd (the one
  bench/dockerd.py starts: its own roots and socket, no iptables, no bridge, a busybox
  image imported locally).
- A bandwidth job: on an agent with `--net 1Gbit`, a receiver task (`--network bridge`)
  and two senders asking `--net 20Mbit` and `--net 80Mbit` get those rates (the receiver
  measures them), 4:1 between them; a `--network none` task reaches nothing.

All traffic stays inside the namespaces and the bridge the agent creates; the host's
firewall and ip_forward are never touched (no --masquerade here: that runs in tests/vm).
Processes are stopped by pid; cgroups, namespaces and the bridge are swept through the
project's own code and checked gone."""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from bench.dockerd import Dockerd
from tcluster.agent.runtime.netns import node_namespaces
from tcluster.agent.runtime.netplan import bridge_name
from tcluster.agent.runtime.tasknet import TaskNetworks
from testkit.procs import Proc, cgroup_v1_usable, leaked_cgroups, sweep_node, tcl, tcl_json, start_agent, start_master, wait_job

ROOT_WHY = cgroup_v1_usable()
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(ROOT_WHY is not None, reason=str(ROOT_WHY))]
DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}
MBIT = 1e6
SEND_S = 5


def _node(tag: str) -> str:
    return f"e2e-{tag}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _start_agent(tmp: Path, master: str, node: str, *extra: str) -> Proc:
    return start_agent(tmp, master, node, "--runtime", "cgroup1", "--cpus", "2", "--memory", "2Gi",
                       "--heartbeat-interval-s", "0.5", *extra)


def _docker_groups(node: str) -> list[str]:
    """The docker backend's cgroup parent for this node (tcluster/<node>.docker) in every
    hierarchy, deepest first."""
    found = []
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        top = hierarchy / "tcluster" / f"{node}.docker"
        if top.is_dir():
            found += sorted((str(p) for p in top.rglob("*") if p.is_dir()), key=len, reverse=True) + [str(top)]
    return found


def _remove_empty_groups(paths: list[str]) -> list[str]:
    """rmdir each (an empty cgroup only); returns those that would not go."""
    left = []
    for path in paths:
        try:
            os.rmdir(path)
        except OSError:
            left.append(path)
    return left


@pytest.fixture
def engine(docker_engine: Dockerd) -> Dockerd:
    """The session's private dockerd (testkit/docker_engine.py; skipped with the reason where
    none can start)."""
    return docker_engine


def test_an_image_job_waits_for_a_docker_node_then_runs_there(engine: Dockerd, tmp_path: Path) -> None:
    plain, docker_node = _node("plain"), _node("dock")
    master, address = start_master(tmp_path)
    agents: list[Proc] = []
    try:
        agents.append(_start_agent(tmp_path, address, plain))
        job_id = tcl(address, "submit", "--image", engine.image, "--cpu", "0.2", "--mem", "64Mi", "--",
                     "sh", "-c", "echo hello from the image; cat /proc/self/cgroup").stdout.strip()
        deadline = time.monotonic() + 30
        while not tcl_json(address, "status", job_id).get("pending_reason") and time.monotonic() < deadline:
            time.sleep(0.2)
        job = tcl_json(address, "status", job_id)
        human = tcl(address, "status", job_id).stdout
        print(f"\n[e2e] without a docker node: {job['state']}: {job['pending_reason']}")
        assert job["state"] == "PENDING"
        assert "tcluster.io/docker" in job["pending_reason"] and "tcluster.io/docker" in human, human
        nodes = {n["name"]: n for n in tcl_json(address, "nodes")}
        assert "tcluster.io/docker" not in nodes[plain]["labels"]

        agents.append(_start_agent(tmp_path, address, docker_node, "--docker-host", engine.url))
        nodes = {n["name"]: n for n in tcl_json(address, "nodes")}
        assert nodes[docker_node]["labels"].get("tcluster.io/docker") == "true", nodes[docker_node]
        job = wait_job(address, job_id, DONE, timeout_s=90)
        logs = tcl(address, "logs", job_id).stdout
        print(f"[e2e] with a docker node: {job['state']} on {job['tasks'][0]['node']}; logs:\n{logs}")
        assert job["state"] == "SUCCEEDED", (job, agents[1].output()[-3000:])
        assert job["tasks"][0]["node"] == docker_node
        assert logs.startswith("hello from the image\n")
        # The container's cgroup is in the agent's tree: tcluster/<node>.docker/<container>.
        assert re.search(rf":/tcluster/{re.escape(docker_node)}\.docker/[0-9a-f]{{12,}}", logs), logs
    finally:
        for agent in agents:
            agent.stop()
        master.stop()
        for node in (plain, docker_node):
            sweep_node(node, tmp_path / node)
    for node in (plain, docker_node):
        assert leaked_cgroups(node) == []
    assert _remove_empty_groups(_docker_groups(docker_node)) == []     # the container's group is gone


# Shell builtins only: the shell reads its own ids and capabilities.
PROBE = 'while read -r k v; do case $k in Uid:|CapEff:|CapBnd:) echo "$k $v";; esac; done < /proc/self/status'


def test_image_tasks_keep_the_agents_uid_policy_and_gain_no_root(engine: Dockerd, tmp_path: Path) -> None:
    """Review finding 4 through the real daemons: an agent without --allow-root refuses
    root and system uids for image tasks as for native ones, and a nobody task that runs a
    setuid-root shell from its image stays uid 65534 with no capabilities."""
    node = _node("priv")
    image = engine.import_setuid_image()
    master, address = start_master(tmp_path)
    agent = None
    try:
        agent = _start_agent(tmp_path, address, node, "--docker-host", engine.url)
        image_job = ("submit", "--image", image, "--cpu", "0.1", "--mem", "32Mi")
        root = tcl(address, *image_job, "--user", "root", "--", "true").stdout.strip()
        system = tcl(address, *image_job, "--user", "daemon", "--", "true").stdout.strip()
        attack = tcl(address, *image_job, "--user", "nobody", "--", "sh", "-c",
                     f"/bin/busybox-suid ash -c '{PROBE}'; echo rc=$?; {PROBE}").stdout.strip()
        refused = {job: wait_job(address, job, DONE, timeout_s=60) for job in (root, system)}
        for job, why in ((root, "may not run as root"), (system, "are refused (`tcl-agent --deny-uids`)")):
            assert refused[job]["state"] == "FAILED" and why in tcl(address, "status", job).stdout, refused[job]
        assert wait_job(address, attack, DONE, timeout_s=60)["state"] == "SUCCEEDED"
        lines = tcl(address, "logs", attack).stdout.splitlines()
        print("\n[e2e] a setuid-root shell in the image, run as nobody:\n" + "\n".join(lines))
        assert [line for line in lines if line.startswith("Uid:")] == ["Uid: 65534\t65534\t65534\t65534"]
        assert "rc=1" in lines and "CapEff: 0000000000000000" in lines and "CapBnd: 0000000000000000" in lines
    finally:
        if agent is not None:
            agent.stop()
        master.stop()
        sweep_node(node, tmp_path / node)
    assert leaked_cgroups(node) == []
    assert _remove_empty_groups(_docker_groups(node)) == []


# The receiver prints its eth0 address (SIOCGIFADDR), then, per connection, the sender's
# name (its first 16 bytes) and the bytes and rate it received, measured from its first
# data to its last (so the senders' socket buffers do not count); it exits after $CONNS.
RECEIVER = r"""
import fcntl, os, socket, struct, threading, time
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
addr = socket.inet_ntoa(fcntl.ioctl(probe.fileno(), 0x8915, struct.pack('256s', b'eth0'))[20:24])
server = socket.create_server(('0.0.0.0', 5001))
print('listening on', addr, flush=True)
def serve(conn):
    name = b''
    while len(name) < 16:
        name += conn.recv(16 - len(name))
    total, first, last, skip = 0, None, None, 0
    while True:
        data = conn.recv(1 << 16)
        if not data:
            break
        now = time.monotonic()
        if first is None:
            first, skip = now, len(data)
        total, last = total + len(data), now
    conn.close()
    rate = (total - skip) * 8 / (last - first)
    print(f'received {name.decode().strip()} bytes {total} seconds {last - first:.2f} rate {rate:.0f}', flush=True)
threads = []
for _ in range(int(os.environ.get('CONNS', '2'))):
    conn, _ = server.accept()
    threads.append(threading.Thread(target=serve, args=(conn,)))
    threads[-1].start()
for t in threads:
    t.join()
"""

SENDER = r"""
import os, socket, time
s = socket.create_connection((os.environ['DST'], 5001), timeout=30)
s.sendall(os.environ['NAME'].encode().ljust(16))
chunk, sent, end = b'x' * 65536, 0, time.monotonic() + float(os.environ['SEND_S'])
while time.monotonic() < end:
    sent += s.send(chunk)
s.shutdown(socket.SHUT_WR)
s.recv(1)
print('sent', sent, flush=True)
"""

LONER = r"""
import os, socket
try:
    socket.create_connection((os.environ['DST'], 5001), timeout=3).close()
    print('connected')
except OSError as e:
    print('unreachable:', e)
"""


def _receiver_address(address: str, job_id: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = re.search(r"listening on (\d+\.\d+\.\d+\.\d+)", tcl(address, "logs", job_id, check=False).stdout)
        if match:
            return match.group(1)
        time.sleep(0.2)
    raise AssertionError(f"the receiver never printed its address: {tcl_json(address, 'status', job_id)}")


@pytest.fixture
def states() -> Iterator[Path]:
    """Where the agent's state directory goes: outside /tmp, like /var/lib/tcluster. A
    native task starts in its private /tmp, which lives in the state directory; under
    /tmp (pytest's tmp_path) that directory is hidden by the very /tmp mounted over it,
    and `python3 -c 'import fcntl'` as user nobody then fails with EACCES."""
    root = Path(tempfile.mkdtemp(prefix="tcl-e2e-net-", dir="/var/tmp"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_two_senders_get_the_bandwidth_they_asked_for(tmp_path: Path, states: Path) -> None:
    node = _node("net")
    subnet = f"10.{200 + os.getpid() % 50}.{uuid.uuid4().int % 250}.0/24"    # unique per run
    state = states / node
    master, address = start_master(tmp_path)
    agent: Proc | None = None
    try:
        agent = _start_agent(states, address, node, "--net", "1Gbit", "--net-subnet", subnet)
        listed = {n["name"]: n for n in tcl_json(address, "nodes")}[node]
        assert listed["labels"].get("tcluster.io/netns") == "true" and listed["capacity"].get("net") == 1e9, listed
        # --workdir /: see test_python_imports_in_the_default_working_directory (an agent bug).
        small = ("--cpu", "0.1", "--mem", "64Mi", "--workdir", "/")
        rx = tcl(address, "submit", "--network", "bridge", *small, "--", "python3", "-c", RECEIVER).stdout.strip()
        wait_job(address, rx, {"RUNNING"}, timeout_s=30)
        dst = _receiver_address(address, rx)
        assert dst in [str(h) for h in ipaddress.ip_network(subnet).hosts()]

        loner = tcl(address, "submit", "--network", "none", "--env", f"DST={dst}", *small, "--",
                    "python3", "-c", LONER).stdout.strip()
        senders = {name: tcl(address, "submit", "--net", rate, "--env", f"DST={dst}", "--env", f"NAME={name}",
                             "--env", f"SEND_S={SEND_S}", *small, "--", "python3", "-c", SENDER).stdout.strip()
                   for name, rate in (("slow", "20Mbit"), ("fast", "80Mbit"))}
        jobs = {name: wait_job(address, job_id, DONE, timeout_s=60) for name, job_id in senders.items()}
        received = wait_job(address, rx, DONE, timeout_s=30)
        rx_log = tcl(address, "logs", rx).stdout
        rates = {m.group(1): float(m.group(2)) for m in re.finditer(r"received (\w+) bytes \d+ seconds [\d.]+ rate (\d+)",
                                                                    rx_log)}
        usage = {name: job["tasks"][0]["usage"] for name, job in jobs.items()}
        print(f"\n[e2e] receiver {dst}:\n{rx_log}"
              f"[e2e] measured: slow {rates.get('slow', 0) / MBIT:.2f} Mbit/s (asked 20), fast "
              f"{rates.get('fast', 0) / MBIT:.2f} Mbit/s (asked 80), ratio "
              f"{rates.get('fast', 0) / max(rates.get('slow', 1), 1):.3f}; net_tx_bytes in status: "
              f"{ {k: u.get('net_tx_bytes') for k, u in usage.items()} }")
        assert received["state"] == "SUCCEEDED" and all(j["state"] == "SUCCEEDED" for j in jobs.values()), \
            (received, jobs, agent.output()[-3000:])
        assert rates["slow"] == pytest.approx(20 * MBIT, rel=0.15)
        assert rates["fast"] == pytest.approx(80 * MBIT, rel=0.15)
        assert rates["fast"] / rates["slow"] == pytest.approx(4, rel=0.15)
        # The heartbeats carried each sender's bytes through its own link.
        assert usage["slow"]["net_tx_bytes"] > 0 and usage["fast"]["net_tx_bytes"] > 2 * usage["slow"]["net_tx_bytes"]

        alone = wait_job(address, loner, DONE, timeout_s=30)
        loner_log = tcl(address, "logs", loner).stdout
        print(f"[e2e] --network none: {loner_log.strip()}")
        assert alone["state"] == "SUCCEEDED" and loner_log.startswith("unreachable:"), (alone, loner_log)
    finally:
        if agent is not None:
            agent.stop()
        master.stop()
        sweep_node(node, state)                        # tasks outlive the agent: kill what is left
        nets = TaskNetworks(node, state, subnet)       # the agent-start sweep, then its shutdown
        nets.setup(keep=())
        nets.close()
    assert leaked_cgroups(node) == []
    assert node_namespaces(node) == []
    assert not Path(f"/sys/class/net/{bridge_name(node)}").exists()


def test_python_imports_in_the_default_working_directory(tmp_path: Path, states: Path) -> None:
    node = _node("cwd")
    master, address = start_master(tmp_path)
    agent: Proc | None = None
    try:
        agent = _start_agent(states, address, node)
        job_id = tcl(address, "submit", "--cpu", "0.1", "--mem", "64Mi", "--", "sh", "-c",
                     "pwd; python3 -c 'import json; print(json.dumps(1))'").stdout.strip()
        job = wait_job(address, job_id, DONE)
        print(f"\n[e2e] default cwd: {job['state']}: {tcl(address, 'logs', job_id).stdout!r} "
              f"{tcl(address, 'logs', job_id, '--stderr').stdout[-300:]!r}")
        assert job["state"] == "SUCCEEDED"
        pwd, printed = tcl(address, "logs", job_id).stdout.splitlines()
        assert pwd and printed == "1"
    finally:
        if agent is not None:
            agent.stop()
        master.stop()
        sweep_node(node, states / node)
    assert leaked_cgroups(node) == []


def test_a_net_limit_lets_a_lone_sender_go_above_its_rate(tmp_path: Path, states: Path) -> None:
    node = _node("ceil")
    subnet = f"10.{200 + os.getpid() % 50}.{uuid.uuid4().int % 250}.0/24"
    state = states / node
    master, address = start_master(tmp_path)
    agent: Proc | None = None
    try:
        agent = _start_agent(states, address, node, "--net", "1Gbit", "--net-subnet", subnet)
        small = ("--cpu", "0.1", "--mem", "64Mi", "--workdir", "/")
        rx = tcl(address, "submit", "--network", "bridge", "--env", "CONNS=1", *small, "--",
                 "python3", "-c", RECEIVER).stdout.strip()
        wait_job(address, rx, {"RUNNING"}, timeout_s=30)
        dst = _receiver_address(address, rx)
        tcl(address, "submit", "--net", "20Mbit", "--net-limit", "80Mbit", "--env", f"DST={dst}", "--env", "NAME=lone",
            "--env", f"SEND_S={SEND_S}", *small, "--", "python3", "-c", SENDER)
        wait_job(address, rx, DONE, timeout_s=60)
        rx_log = tcl(address, "logs", rx).stdout
        match = re.search(r"received lone bytes \d+ seconds [\d.]+ rate (\d+)", rx_log)
        assert match, rx_log
        print(f"\n[e2e] --net 20Mbit --net-limit 80Mbit alone: {float(match.group(1)) / MBIT:.2f} Mbit/s")
        assert float(match.group(1)) > 60 * MBIT
    finally:
        if agent is not None:
            agent.stop()
        master.stop()
        sweep_node(node, state)
        nets = TaskNetworks(node, state, subnet)
        nets.setup(keep=())
        nets.close()
    assert leaked_cgroups(node) == [] and node_namespaces(node) == []
