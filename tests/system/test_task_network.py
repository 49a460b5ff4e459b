"""Task networks on real namespaces, veths, a bridge and HTB (as root): two shaped senders
measured with iperf3, a `none` task cut off, masquerade, and nothing left behind. All
traffic stays inside the namespaces and the bridge this test creates; the host firewall
is not touched (the masquerade test builds its own "host" namespace, and checks that the
real host's ip_forward and nftables tables are as they were). Only inside the tests/vm
guest (TCL_VM_GUEST=1, set by tests/vm/guest_checks.py) does one more test put the NAT
rule where the agent puts it, into the real root namespace's firewall: the guest is the
place for firewall changes. The guest runs the tests marked `guest`: the firewall one, and
the shaped senders and masquerade on its own kernel's modules (HTB, nf_tables)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from tcluster.agent.runtime.base import LaunchError, TaskSpec
from tcluster.agent.runtime.netns import create_netns, node_namespaces, remove_netns, run_in_netns
from tcluster.agent.runtime.netplan import bridge_name, host_veth, nat_rule, netns_name
from tcluster.agent.runtime.tasknet import TaskNetworks
from tcluster.domain.resources import Resources


def _why_not() -> str:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("iperf3") is None:
        return "iperf3 is not installed (apt-get install iperf3)"
    return ""


SKIP = _why_not()
IN_VM_GUEST = os.environ.get("TCL_VM_GUEST") == "1"
pytestmark = [pytest.mark.system, pytest.mark.skipif(bool(SKIP), reason=SKIP)]
MBIT = 1e6
SECONDS = 5
# The two senders' rates, 1:4. Under qemu's software emulation (the tests/vm guest, on a
# busy 2-core host) the guest's CPU is slow and shared: there one unshaped sender carried
# 130 Mbit/s and a lone 20 Mbit/s sender got 19.1, but two concurrent senders got 14 + 43
# when 20 + 80 were asked, 4.9 + 15 for 5 + 20. So the guest runs the same test at a
# tenth of the rates, leaving out the first second (the initial burst weighs more at low
# rates); the bounds (15%, ratio 4 +- 15%) are the same.
SLOW, FAST = (2 * MBIT, 8 * MBIT) if IN_VM_GUEST else (20 * MBIT, 80 * MBIT)
OMIT_S = 1 if IN_VM_GUEST else 0


def spec(key: str, network: str = "bridge", rate: float = 0.0, ceil: float = 0.0) -> TaskSpec:
    return TaskSpec(key=key, task_id=key, attempt=0, command=("true",), resources=Resources(0.1, 1 << 20),
                    stdout_path="", stderr_path="", network=network, net_rate_bps=rate, net_ceil_bps=ceil)


def links(prefix: str) -> list[str]:
    return sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(prefix))


@pytest.fixture
def nets(tmp_path: Path) -> Iterator[TaskNetworks]:
    node = f"n{os.getpid()}-{uuid.uuid4().hex[:6]}"
    # A subnet of its own per run, so concurrent runs on this host never share one.
    subnet = f"10.{200 + os.getpid() % 50}.{uuid.uuid4().int % 250}.0/24"
    before = set(links("tv"))
    nets = TaskNetworks(node, tmp_path / "state", subnet)
    nets.setup()
    try:
        yield nets
    finally:
        nets.setup(keep=())          # the agent-start sweep removes whatever a failure left
        nets.close()
        assert node_namespaces(node) == []
        assert not Path(f"/sys/class/net/{bridge_name(node)}").exists()
        assert set(links("tv")) <= before


def interfaces(path: str) -> list[str]:
    """The links a namespace has (/proc/thread-self/net: the calling thread's namespace)."""
    text = run_in_netns(path, Path("/proc/thread-self/net/dev").read_text)
    return sorted(line.split(":")[0].strip() for line in text.splitlines()[2:])


def reaches(path: str, ip: str, port: int) -> bool:
    def connect() -> bool:
        try:
            socket.create_connection((ip, port), timeout=2).close()
            return True
        except OSError:
            return False
    return run_in_netns(path, connect)


def popen_in(path: str, argv: list[str]) -> subprocess.Popen[bytes]:
    return run_in_netns(path, subprocess.Popen, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def iperf_pair(rx_path: str, rx_ip: str, senders: dict[str, str]) -> dict[str, float]:
    """Concurrent iperf3 clients (one server port each); the receiver-side bit rate."""
    servers, clients = [], {}
    try:
        for port, _ in enumerate(senders, 5301):
            servers.append(popen_in(rx_path, ["iperf3", "-s", "-1", "-p", str(port)]))
        ready = lambda: all(f":{p:04X}" in run_in_netns(rx_path, Path("/proc/thread-self/net/tcp").read_text)  # noqa: E731
                            for p in range(5301, 5301 + len(senders)))
        for _ in range(200):
            if ready():
                break
            subprocess.run(["sleep", "0.02"])
        for port, (key, path) in enumerate(senders.items(), 5301):
            clients[key] = popen_in(path, ["iperf3", "-c", rx_ip, "-p", str(port), "-t", str(SECONDS), "-O", str(OMIT_S),
                                            "-J"])
        out = {}
        for key, proc in clients.items():
            stdout, _ = proc.communicate(timeout=SECONDS + OMIT_S + 30)
            out[key] = json.loads(stdout)["end"]["sum_received"]["bits_per_second"]
        return out
    finally:
        for proc in [*servers, *clients.values()]:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.mark.guest
def test_two_shaped_senders_get_their_rates(nets: TaskNetworks) -> None:
    rx, slow, fast = nets.prepare(spec("rx.0")), nets.prepare(spec("slow.0", rate=SLOW)), \
        nets.prepare(spec("fast.0", rate=FAST))
    assert rx and slow and fast and rx.address
    try:
        rates = iperf_pair(rx.netns_path, str(rx.address.ip), {"slow": slow.netns_path, "fast": fast.netns_path})
        sent = {k: nets.counters(f"{k}.0") for k in ("slow", "fast")}
        print(f"\nmeasured: slow {rates['slow'] / MBIT:.2f} Mbit/s (asked {SLOW / MBIT:g}), fast "
              f"{rates['fast'] / MBIT:.2f} Mbit/s (asked {FAST / MBIT:g}), ratio {rates['fast'] / rates['slow']:.3f}; "
              f"veth bytes sent {sent}")
        assert rates["slow"] == pytest.approx(SLOW, rel=0.15)
        assert rates["fast"] == pytest.approx(FAST, rel=0.15)
        assert rates["fast"] / rates["slow"] == pytest.approx(4, rel=0.15)
        assert sent["slow"] and sent["fast"] and sent["fast"].tx_bytes > 3 * sent["slow"].tx_bytes
    finally:
        for key in ("rx.0", "slow.0", "fast.0"):
            nets.release(key)
    assert node_namespaces(nets.node) == []
    assert links(host_veth(nets.node, "rx.0")) == []


def test_tasks_reach_each_other_and_the_host_but_none_mode_reaches_nothing(nets: TaskNetworks) -> None:
    a, b, alone = nets.prepare(spec("a.0")), nets.prepare(spec("b.0")), nets.prepare(spec("x.0", "none"))
    assert a and b and alone and b.address
    # Listeners: one in task b's namespace (a socket belongs to its creator's namespace),
    # one on the host at the bridge address.
    in_b = run_in_netns(b.netns_path, socket.create_server, ("0.0.0.0", 7070))
    on_host = socket.create_server((str(nets.gateway.ip), 7071))
    try:
        assert reaches(a.netns_path, str(b.address.ip), 7070)
        assert reaches(a.netns_path, str(nets.gateway.ip), 7071)
        assert not reaches(alone.netns_path, str(nets.gateway.ip), 7071)
        assert not reaches(alone.netns_path, str(b.address.ip), 7070)
        assert interfaces(alone.netns_path) == ["lo"]
        loop = run_in_netns(alone.netns_path, socket.create_server, ("127.0.0.1", 7072))
        try:
            assert reaches(alone.netns_path, "127.0.0.1", 7072)          # loopback is up
        finally:
            loop.close()
        assert interfaces(a.netns_path) == ["eth0", "lo"]
    finally:
        in_b.close()
        on_host.close()
        for key in ("a.0", "b.0", "x.0"):
            nets.release(key)
    assert nets.address("a.0") is None


def test_addresses_come_back_after_a_restart_and_the_sweep_removes_the_rest(nets: TaskNetworks,
                                                                            tmp_path: Path) -> None:
    kept, lost = nets.prepare(spec("kept.0")), nets.prepare(spec("lost.0"))
    assert kept and lost
    again = TaskNetworks(nets.node, tmp_path / "state", str(nets.subnet))      # the agent restarted
    again.setup(keep={"kept.0"})
    assert again.address("kept.0") == str(kept.address.ip) if kept.address else False
    assert again.address("lost.0") is None
    assert node_namespaces(nets.node) == ["kept.0"]
    assert links(lost.host_if) == [] and links(kept.host_if) == [kept.host_if]
    again.release("kept.0")


def test_a_rate_without_bridge_mode_is_refused(nets: TaskNetworks) -> None:
    with pytest.raises(LaunchError, match="bridge"):
        nets.prepare(spec("bad.0", "none", rate=MBIT))
    with pytest.raises(LaunchError, match="ceiling"):
        nets.prepare(spec("bad.1", rate=2 * MBIT, ceil=MBIT))
    assert node_namespaces(nets.node) == [] and nets.address("bad.1") is None


def _host_firewall() -> tuple[str, list[str]]:
    """The host's ip_forward and nftables table names: read only, to prove they stay."""
    from pyroute2.nftables.main import NFTables
    nft = NFTables(nfgen_family=0)
    try:
        tables = sorted(str(t.get("NFTA_TABLE_NAME")) for t in nft.get_tables())
    finally:
        nft.close()
    return Path("/proc/sys/net/ipv4/ip_forward").read_text(), tables


@pytest.mark.guest
def test_masquerade_inside_a_private_host_namespace(tmp_path: Path) -> None:
    """--masquerade end to end without touching this host's firewall: the "host" here is a
    namespace the test made (its own nftables, its own ip_forward), with an "outside"
    namespace behind an uplink that has no route back to the task subnet. The outside sees
    the host's uplink address, not the task's: the NAT rule did it."""
    before = _host_firewall()
    tag = f"tcl-t{os.getpid()}-{uuid.uuid4().hex[:4]}"
    host, out = create_netns(f"{tag}-host"), create_netns(f"{tag}-out")
    node = f"m{os.getpid()}-{uuid.uuid4().hex[:6]}"
    nets = TaskNetworks(node, tmp_path / "state", "10.66.0.0/24", masquerade=True)
    try:
        run_in_netns(host, _uplink, out)
        run_in_netns(host, nets.setup)
        task_ns = run_in_netns(host, nets.prepare, spec("t.0"))
        assert task_ns is not None
        listener = run_in_netns(out, socket.create_server, ("198.51.100.2", 7080))
        try:
            assert reaches(task_ns.netns_path, "198.51.100.2", 7080)
            listener.settimeout(5)
            conn, peer = listener.accept()
            conn.close()
        finally:
            listener.close()
        assert peer[0] == "198.51.100.1"                    # masqueraded to the uplink address
        assert run_in_netns(host, Path("/proc/sys/net/ipv4/ip_forward").read_text).strip() == "1"
        run_in_netns(host, nets.release, "t.0")
        run_in_netns(host, nets.close)                       # bridge and NAT table go
        assert nat_rule(node, nets.subnet).table not in run_in_netns(host, _tables)
    finally:
        remove_netns(f"{tag}-host")
        remove_netns(f"{tag}-out")
        for key in node_namespaces(node):
            remove_netns(netns_name(node, key))
    assert _host_firewall() == before


def _uplink(out_path: str) -> None:
    """Runs in the private host namespace: a veth to the outside namespace, 198.51.100.0/24
    (TEST-NET-2), and no route from outside back to the task subnet."""
    from pyroute2 import IPRoute
    with IPRoute() as ipr:
        ipr.link("add", ifname="up0", kind="veth", peer={"ifname": "up1", "net_ns_fd": out_path})
        idx = ipr.link_lookup(ifname="up0")[0]
        ipr.addr("add", index=idx, address="198.51.100.1", prefixlen=24)
        ipr.link("set", index=idx, state="up")
    run_in_netns(out_path, _outside)


def _outside() -> None:
    from pyroute2 import IPRoute
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname="up1")[0]
        ipr.addr("add", index=idx, address="198.51.100.2", prefixlen=24)
        ipr.link("set", index=idx, state="up")
        ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")


def _tables() -> list[str]:
    from pyroute2.nftables.main import NFTables
    nft = NFTables(nfgen_family=0)
    try:
        return [str(t.get("NFTA_TABLE_NAME")) for t in nft.get_tables()]
    finally:
        nft.close()


def _nft_table(table: str) -> str | None:
    """`nft list table ip T` (the nft CLI, independent of pyroute2); None: no such table."""
    done = subprocess.run(["nft", "list", "table", "ip", table], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


@pytest.mark.guest
@pytest.mark.skipif(not IN_VM_GUEST, reason="changes the real firewall and ip_forward: runs in the tests/vm guest only")
def test_masquerade_in_the_guests_own_firewall(tmp_path: Path) -> None:
    """--masquerade as the agent does it, in the VM guest's real root namespace: the rule
    `nft list` shows is the one NatRule.nft_script() describes, it is there while a task
    runs (and stays while a task is still on the bridge), a task's connection to a
    namespace behind the guest's uplink arrives from the uplink address, and close()
    after the task is gone removes the table and the bridge."""
    assert shutil.which("nft"), "the guest image has nftables"
    tag = f"tcl-t{os.getpid()}-{uuid.uuid4().hex[:4]}"
    out = create_netns(f"{tag}-out")
    node = f"g{os.getpid()}-{uuid.uuid4().hex[:6]}"
    nets = TaskNetworks(node, tmp_path / "state", f"10.67.{uuid.uuid4().int % 250}.0/24", masquerade=True)
    rule = nat_rule(node, nets.subnet)
    sleeper: subprocess.Popen[bytes] | None = None
    try:
        _uplink(out)                                          # in the guest's root namespace
        nets.setup()
        listed = _nft_table(rule.table)
        print(f"\nnft list table ip {rule.table}:\n{listed}")
        assert listed == rule.nft_script()
        assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "1"
        task = nets.prepare(spec("t.0"))
        assert task is not None and task.address is not None
        sleeper = popen_in(task.netns_path, ["sleep", "120"])   # a task running in its namespace
        listener = run_in_netns(out, socket.create_server, ("198.51.100.2", 7080))
        try:
            assert reaches(task.netns_path, "198.51.100.2", 7080)
            listener.settimeout(5)
            conn, peer = listener.accept()
            conn.close()
        finally:
            listener.close()
        assert peer[0] == "198.51.100.1" != str(task.address.ip)      # masqueraded
        assert _nft_table(rule.table) == rule.nft_script()             # while the task runs
        nets.close()                         # an agent stopping while the task still runs...
        assert _nft_table(rule.table) == rule.nft_script()             # ...leaves rule and bridge
        assert Path(f"/sys/class/net/{bridge_name(node)}").exists()
        sleeper.kill()
        sleeper.wait()
        nets.release("t.0")
        nets.close()                                          # the task is gone: so are they
        assert _nft_table(rule.table) is None
        assert not Path(f"/sys/class/net/{bridge_name(node)}").exists()
    finally:
        if sleeper is not None and sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
        nets.setup(keep=())
        nets.close()
        _drop_uplink()
        remove_netns(f"{tag}-out")
    assert node_namespaces(node) == [] and _nft_table(rule.table) is None


def _drop_uplink() -> None:
    from pyroute2 import IPRoute
    with IPRoute() as ipr:
        for idx in ipr.link_lookup(ifname="up0"):
            ipr.link("del", index=idx)
