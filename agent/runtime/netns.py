"""Per-task network namespaces, applied with netlink (pyroute2) and a few raw syscalls.

A task's namespace is named (a bind mount at /run/netns/<name>, like `ip netns add`), so it
outlives any process, is found again after an agent restart, and is removed by name:
- native tasks: created empty here; the task supervisor is then spawned from a thread that
  has entered it (`run_in_netns`): namespaces are per thread and a child inherits its
  creator thread's, so the shim and the task start inside it with no shim change;
- docker tasks: the container starts with network_mode=none and its namespace (from its
  init pid) is bound to the same kind of name, then wired the same way, CNI-style.

`bridge` mode: a veth pair, the host end on the node's bridge (which holds the gateway
address), the task end `eth0` with an address from the node subnet and a default route
via the bridge, an HTB qdisc on it for the task's egress rate (see netplan)."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import threading
from dataclasses import dataclass
from ipaddress import IPv4Interface
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from pyroute2 import IPRoute, NetlinkError

from .base import LaunchError
from .netplan import HTB_CLASS, HTB_HANDLE, NETNS_DIR, TASK_IF, NatRule, NetPlan, bridge_name, host_veth, node_prefix

log = logging.getLogger(__name__)
T = TypeVar("T")

CLONE_NEWNET = 0x40000000
MS_BIND, MS_REC, MS_SHARED = 0x1000, 0x4000, 1 << 20
MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


# -- syscalls ---------------------------------------------------------------------------
def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _setns(fd: int) -> None:
    _check(_libc.setns(fd, CLONE_NEWNET), "setns")


def _bind(source: str, target: str) -> None:
    _check(_libc.mount(source.encode(), target.encode(), None, MS_BIND, None), f"bind {source} on {target}")


def _share_netns_dir() -> None:
    """As iproute2 does: /run/netns a shared mount, so a namespace bound there shows in
    (and, once removed, leaves) every mount namespace made afterwards."""
    os.makedirs(NETNS_DIR, exist_ok=True)
    if _libc.mount(b"", NETNS_DIR.encode(), b"none", MS_SHARED | MS_REC, None) != 0:
        _check(_libc.mount(NETNS_DIR.encode(), NETNS_DIR.encode(), b"none", MS_BIND | MS_REC, None), "bind /run/netns")
        _check(_libc.mount(b"", NETNS_DIR.encode(), b"none", MS_SHARED | MS_REC, None), "share /run/netns")


def _in_new_thread(fn: Callable[[], T], name: str) -> T:
    """fn() in a throwaway thread, its result or exception handed back: a thread that
    changed namespace is never reused for anything else."""
    out: dict[str, object] = {}

    def body() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:
            out["error"] = e

    thread = threading.Thread(target=body, name=name)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["value"]  # type: ignore[return-value]


def run_in_netns(path: str, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """fn(*args) in a new thread that has entered the namespace at `path`: whatever it
    spawns lives there; the calling thread (and the rest of the agent) stays where it is."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def entered() -> T:
        _setns(fd)
        return fn(*args, **kwargs)

    try:
        return _in_new_thread(entered, f"netns:{os.path.basename(path)}")
    finally:
        os.close(fd)


def create_netns(name: str, pid: int | None = None) -> str:
    """/run/netns/<name>: a new empty namespace, or (pid) the one that process lives in."""
    _share_netns_dir()
    path = f"{NETNS_DIR}/{name}"
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
    try:
        if pid is not None:
            _bind(f"/proc/{pid}/ns/net", path)
        else:
            def fresh() -> None:       # only this thread moves into the new namespace
                _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
                _bind("/proc/thread-self/ns/net", path)
            _in_new_thread(fresh, f"netns-create:{name}")
    except BaseException:
        os.unlink(path)
        raise
    return path


def remove_netns(name: str) -> None:
    """Unbind and unlink; gone already is fine. The namespace itself ends when its last
    process and last bind are gone."""
    path = f"{NETNS_DIR}/{name}"
    if _libc.umount2(path.encode(), MNT_DETACH) != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
        _check(-1, f"umount {path}")
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# -- links ------------------------------------------------------------------------------
def _index(ipr: IPRoute, ifname: str) -> int | None:
    found = ipr.link_lookup(ifname=ifname)
    return found[0] if found else None


def ensure_bridge(node: str, gw: IPv4Interface) -> str:
    """The node's bridge with the gateway address, up. Idempotent (agent restarts)."""
    name = bridge_name(node)
    with IPRoute() as ipr:
        if _index(ipr, name) is None:
            ipr.link("add", ifname=name, kind="bridge")
        idx = _index(ipr, name)
        have = {(a.get("IFA_ADDRESS"), a["prefixlen"]) for a in ipr.get_addr(index=idx, family=2)}
        if (str(gw.ip), gw.network.prefixlen) not in have:
            ipr.addr("add", index=idx, address=str(gw.ip), prefixlen=gw.network.prefixlen)
        ipr.link("set", index=idx, state="up")
    return name


def remove_bridge(node: str) -> bool:
    """Delete the node's bridge unless a task's veth is still on it. True when gone."""
    with IPRoute() as ipr:
        idx = _index(ipr, bridge_name(node))
        if idx is None:
            return True
        if any(link.get("IFLA_MASTER") == idx for link in ipr.get_links()):
            return False
        ipr.link("del", index=idx)
    return True


def _inside(plan: NetPlan) -> None:
    """Runs in the task's namespace: loopback, and in bridge mode eth0, route, HTB."""
    with IPRoute() as ipr:
        ipr.link("set", index=_index(ipr, "lo"), state="up")
        if plan.mode != "bridge":
            return
        assert plan.address is not None and plan.gateway is not None
        idx = _index(ipr, TASK_IF)
        ipr.addr("add", index=idx, address=str(plan.address.ip), prefixlen=plan.address.network.prefixlen)
        ipr.link("set", index=idx, state="up")
        ipr.route("add", dst="0.0.0.0/0", gateway=str(plan.gateway.ip))
        if plan.shaping is not None:
            ipr.tc("add", "htb", index=idx, handle=HTB_HANDLE, default=HTB_CLASS & 0xFFFF)
            ipr.tc("add-class", "htb", index=idx, **plan.shaping.htb_parent())
            ipr.tc("add-class", "htb", index=idx, **plan.shaping.htb_class())


def wire(plan: NetPlan) -> None:
    """Give the (existing, named) namespace of plan its links. LaunchError on failure;
    the caller then calls `unwire`."""
    try:
        if plan.mode == "bridge":
            with IPRoute() as ipr:
                bridge = _index(ipr, plan.bridge)
                if bridge is None:
                    raise LaunchError(f"the node bridge {plan.bridge} is missing (was setup() called?)")
                ipr.link("add", ifname=plan.host_if, kind="veth",
                         peer={"ifname": TASK_IF, "net_ns_fd": plan.netns_path})
                idx = _index(ipr, plan.host_if)
                ipr.link("set", index=idx, master=bridge, state="up")
        run_in_netns(plan.netns_path, _inside, plan)
    except (OSError, NetlinkError) as e:
        raise LaunchError(f"cannot set up the task's network ({plan.mode}): {e}") from e


def unwire(node: str, key: str) -> None:
    """Remove the task's veth (its peer and qdisc go with it) and its namespace. Idempotent."""
    with IPRoute() as ipr:
        idx = _index(ipr, host_veth(node, key))
        if idx is not None:
            try:
                ipr.link("del", index=idx)
            except NetlinkError as e:
                if e.code != errno.ENODEV:
                    raise
    remove_netns(node_prefix(node) + key)


def sweep(node: str, keep: Iterable[str] = ()) -> list[str]:
    """At agent start: remove every namespace and veth of this node whose task key is not in
    `keep` (the containers still alive). Returns what it removed (keys, then link names)."""
    keep = set(keep)
    prefix = node_prefix(node)
    names = os.listdir(NETNS_DIR) if os.path.isdir(NETNS_DIR) else []
    gone = sorted(n[len(prefix):] for n in names if n.startswith(prefix) and n[len(prefix):] not in keep)
    for key in gone:
        unwire(node, key)
    wanted = {host_veth(node, k) for k in keep}
    with IPRoute() as ipr:
        bridge = _index(ipr, bridge_name(node))
        for link in ipr.get_links():
            name = link.get("IFLA_IFNAME")
            if bridge is not None and link.get("IFLA_MASTER") == bridge and name not in wanted:
                ipr.link("del", index=link["index"])
                gone.append(name)
    return gone


def node_namespaces(node: str) -> list[str]:
    """Keys of this node's namespaces (tests, and the agent's own checks)."""
    prefix = node_prefix(node)
    names = os.listdir(NETNS_DIR) if os.path.isdir(NETNS_DIR) else []
    return sorted(n[len(prefix):] for n in names if n.startswith(prefix))


@dataclass(frozen=True)
class NetCounters:
    tx_bytes: int      # sent by the task
    rx_bytes: int      # received by the task
    tx_packets: int = 0
    rx_packets: int = 0


def counters(node: str, key: str) -> NetCounters | None:
    """Bytes through the task's veth, seen from the host end (so what the host receives is
    what the task sent). sysfs, not netlink: a heartbeat reads this for every task."""
    stats = Path("/sys/class/net") / host_veth(node, key) / "statistics"
    try:
        read = lambda name: int((stats / name).read_text())  # noqa: E731
        return NetCounters(read("rx_bytes"), read("tx_bytes"), read("rx_packets"), read("tx_packets"))
    except (OSError, ValueError):
        return None


# -- masquerade (--masquerade; changes the host's firewall: exercised in tests/vm only) -------
def nat_expressions(rule: NatRule) -> tuple[list[object], ...]:
    """pyroute2 expressions of `ip saddr S ip daddr != S masquerade`."""
    from pyroute2.netlink.nfnetlink.nftsocket import Cmp
    from pyroute2.nftables.expressions import ipv4addr, masq
    subnet = str(rule.subnet)
    return (ipv4addr(src=subnet), ipv4addr(dst=subnet, op=Cmp.NFT_CMP_NEQ), masq())


NAT_PRIORITY = 100           # srcnat


def install_masquerade(rule: NatRule) -> None:
    """Our own table with one postrouting NAT chain and rule (replaced if present), and IPv4
    forwarding on, without which nothing leaves the bridge."""
    from pyroute2.nftables.main import NFTables
    remove_masquerade(rule)
    nft = NFTables(nfgen_family=2)
    try:
        nft.table("add", name=rule.table)
        nft.chain("add", table=rule.table, name="postrouting", hook="postrouting", type="nat",
                  priority=NAT_PRIORITY, policy=1)
        nft.rule("add", table=rule.table, chain="postrouting", expressions=nat_expressions(rule))
    finally:
        nft.close()
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1")


def remove_masquerade(rule: NatRule) -> None:
    from pyroute2.nftables.main import NFTables
    nft = NFTables(nfgen_family=2)
    try:
        nft.table("del", name=rule.table)
    except NetlinkError as e:
        if e.code != errno.ENOENT:
            raise
    finally:
        nft.close()
