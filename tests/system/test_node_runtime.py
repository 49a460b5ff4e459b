"""The agent's runtime as a whole (NodeRuntime): native and docker tasks side by side, in
network namespaces of their own on the node bridge; a restart sweeps what is no longer
anybody's. Real cgroups, a private dockerd, real namespaces; nothing of the host's
firewall is touched, and nothing is left behind."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from bench.dockerd import Dockerd, docker_missing
from tcluster.agent.runtime import make_node_runtime
from tcluster.agent.runtime.base import LaunchError
from tcluster.agent.runtime.netns import node_namespaces
from tcluster.agent.runtime.netplan import bridge_name
from tcluster.agent.runtime.node import NodeRuntime
from testkit.cgroups import SKIP_REASON, leftovers, make_runtime, remove_all, task, wait_exit

WHY = SKIP_REASON or docker_missing(cli=False) or ""
pytestmark = [pytest.mark.system, pytest.mark.docker, pytest.mark.skipif(bool(WHY), reason=WHY)]
PY = "/usr/bin/python3"


def node_runtime(engine: Dockerd, node: str, state: Path, subnet: str) -> NodeRuntime:
    rt = make_node_runtime(make_runtime(node, state), node, state, docker_host=engine.url, net=True,
                           net_subnet=subnet)
    rt.setup()
    return rt


@pytest.fixture
def setting(tmp_path: Path) -> tuple[str, str]:
    return f"r{os.getpid()}-{uuid.uuid4().hex[:6]}", f"10.{200 + os.getpid() % 50}.{uuid.uuid4().int % 250}.0/24"


@pytest.fixture
def runtime(engine: Dockerd, setting: tuple[str, str], tmp_path: Path) -> Iterator[NodeRuntime]:
    node, subnet = setting
    rt = node_runtime(engine, node, tmp_path / "state", subnet)
    try:
        yield rt
    finally:
        remove_all(rt)
        assert leftovers(node) == [] and node_namespaces(node) == []
        assert not Path(f"/sys/class/net/{bridge_name(node)}").exists()


# The client connects to the server's address and prints what it read; both in Python so
# the native task needs nothing but the host's interpreter.
SERVER = ("import socket; s = socket.create_server(('0.0.0.0', 7000)); c, _ = s.accept(); "
          "c.sendall(open('/proc/net/dev').read().encode()); c.close()")


def test_a_docker_task_talks_to_a_native_task_over_the_bridge(runtime: NodeRuntime, engine: Dockerd,
                                                               tmp_path: Path) -> None:
    assert runtime.nets is not None
    server = runtime.start(task(tmp_path, "srv.0", (PY, "-c", SERVER), network="bridge", net_rate_bps=50e6))
    srv_ip = runtime.nets.address("srv.0")
    assert srv_ip is not None
    fetch = f"for i in 1 2 3 4 5 6 7 8 9 10; do nc {srv_ip} 7000 && exit 0; sleep 0.2; done; exit 1"
    client = runtime.start(task(tmp_path, "cli.0", ("sh", "-c", fetch), image=engine.image, network="bridge"))
    wait_exit(client)
    wait_exit(server)
    assert runtime.exit_status("cli.0").exit_code == 0, (tmp_path / "cli.0.err").read_text()
    assert runtime.exit_status("srv.0").exit_code == 0, (tmp_path / "srv.0.err").read_text()
    got = (tmp_path / "cli.0.out").read_text()        # the native server's /proc/net/dev
    assert "eth0" in got and "lo" in got
    assert runtime.nets.address("cli.0") is not None
    for key in ("srv.0", "cli.0"):
        runtime.remove(key)
    assert node_namespaces(runtime.nets.node) == [] and runtime.nets.address("cli.0") is None


def test_heartbeat_samples_carry_network_bytes(runtime: NodeRuntime, tmp_path: Path) -> None:
    assert runtime.nets is not None
    talk = runtime.start(task(tmp_path, "talk.0", ("sleep", "30"), network="bridge"))
    peer = runtime.nets.address("talk.0")
    assert peer
    usage = runtime.sample("talk.0")
    assert usage is not None and usage.net_tx_bytes is not None and usage.net_rx_bytes is not None
    runtime.signal("talk.0", signal.SIGKILL)
    wait_exit(talk)
    runtime.remove("talk.0")


def test_none_mode_and_host_mode_and_refusals(runtime: NodeRuntime, engine: Dockerd, tmp_path: Path) -> None:
    alone = runtime.start(task(tmp_path, "alone.0", ("cat", "/proc/net/dev"), network="none"))
    wait_exit(alone)
    links = [line.split(":")[0].strip() for line in (tmp_path / "alone.0.out").read_text().splitlines()[2:]]
    assert links == ["lo"]
    with pytest.raises(LaunchError, match="needs network mode bridge"):
        runtime.start(task(tmp_path, "bad.0", ("true",), net_rate_bps=1e6))
    with pytest.raises(LaunchError, match="cannot be pulled"):
        runtime.start(task(tmp_path, "img.0", ("true",), image="tcl-nope:0", network="bridge"))
    assert sorted(runtime.containers()) == ["alone.0"]
    runtime.remove("alone.0")


def test_a_restart_keeps_running_tasks_networks_and_sweeps_the_rest(engine: Dockerd, setting: tuple[str, str],
                                                                     tmp_path: Path) -> None:
    node, subnet = setting
    state = tmp_path / "state"
    first = node_runtime(engine, node, state, subnet)
    keep = first.start(task(tmp_path, "keep.0", ("sleep", "60"), image=engine.image, network="bridge"))
    os.close(keep.exit_fd)
    assert first.nets is not None
    addr = first.nets.address("keep.0")
    first.nets.prepare(task(tmp_path, "stale.0", ("true",), network="bridge"))   # a crash left this behind
    first.close()
    again = node_runtime(engine, node, state, subnet)
    try:
        assert again.nets is not None
        assert node_namespaces(node) == ["keep.0"] and again.nets.address("keep.0") == addr
        adopted = again.adopt("keep.0")
        assert adopted is not None
        again.signal("keep.0", signal.SIGKILL)
        wait_exit(adopted)
        assert again.exit_status("keep.0").signal == signal.SIGKILL
    finally:
        for key in again.containers():
            again.remove(key)
        again.close()
    assert node_namespaces(node) == [] and leftovers(node) == []
