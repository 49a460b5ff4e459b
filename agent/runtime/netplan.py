"""What a task's network looks like, computed as data (pure; netns.py applies it).

Names are derived from the node and the task key with a hash, because Linux interface
names hold at most 15 bytes and several agents (tests, `tcl dev`) can share one host: the
node hash keeps one node's sweep away from another's links and namespaces.

Bandwidth is shaped where the task's egress leaves it: an HTB qdisc on the task's end of
the veth, inside its namespace. Egress shaping is exact there (the qdisc holds packets
back), whereas the host end only sees that traffic as ingress, which can be policed
(dropped) but not shaped without an extra ifb device per task. A task running as root
holds CAP_NET_ADMIN in its own namespace and could remove the qdisc; docker drops that
capability by default, and native tasks run as their owner's user."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from ipaddress import IPv4Interface, IPv4Network

from .base import LaunchError

MODES = ("host", "none", "bridge")
NETNS_DIR = "/run/netns"
IFNAMSIZ = 15
TASK_IF = "eth0"                 # names are per namespace: every task sees its own eth0
HTB_HANDLE = 0x10000             # 1:
HTB_PARENT = 0x10001             # 1:1, rate = ceil: what the task's class may borrow from
HTB_CLASS = 0x10010              # 1:10, the default class: all of the task's traffic
BURST_S = 0.01                   # tokens for 10 ms at the rate...
MIN_BURST = 2 * 65536            # ...but at least two GSO segments (veth sends 64 KiB skbs)
MAX_RATE_BPS = 100e9


def _hash(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def bridge_name(node: str) -> str:
    return f"tcl-{_hash(node, 8)}"


def node_prefix(node: str) -> str:
    """Prefix of this node's namespace names (/run/netns/<prefix><key>)."""
    return f"tcl-{_hash(node, 8)}-"


def netns_name(node: str, key: str) -> str:
    return node_prefix(node) + key


def host_veth(node: str, key: str) -> str:
    """The host end of the task's veth: `tv` + 12 hex digits of (node, key)."""
    name = f"tv{_hash(node + '/' + key, 12)}"
    assert len(name) <= IFNAMSIZ
    return name


@dataclass(frozen=True)
class Shaping:
    rate_bps: float
    ceil_bps: float
    burst_bytes: int
    cburst_bytes: int

    def htb_parent(self) -> dict[str, object]:
        """A root class at the ceiling: HTB lets only a class with a parent borrow above its
        rate, so without it the ceiling would change nothing."""
        return {"handle": HTB_PARENT, "parent": HTB_HANDLE, "rate": f"{int(self.ceil_bps)}bit",
                "ceil": f"{int(self.ceil_bps)}bit", "burst": self.cburst_bytes, "cburst": self.cburst_bytes,
                "mtu": 65536}

    def htb_class(self) -> dict[str, object]:
        """pyroute2 tc('add-class', 'htb', ...) keywords."""
        return {"handle": HTB_CLASS, "parent": HTB_PARENT, "rate": f"{int(self.rate_bps)}bit",
                "ceil": f"{int(self.ceil_bps)}bit", "burst": self.burst_bytes,
                "cburst": self.cburst_bytes, "mtu": 65536}


def shaping(rate_bps: float, ceil_bps: float) -> Shaping | None:
    """None when no rate was asked; LaunchError for a nonsensical one."""
    for value in (rate_bps, ceil_bps):
        if not math.isfinite(value) or value < 0 or value > MAX_RATE_BPS:
            raise LaunchError(f"network rate {value!r} bit/s is out of range (0 .. {MAX_RATE_BPS:.0f})")
    if rate_bps == 0:
        if ceil_bps:
            raise LaunchError("a network ceiling needs a rate (net_rate_bps) as well")
        return None
    ceil = ceil_bps or rate_bps
    if ceil < rate_bps:
        raise LaunchError(f"network ceiling {ceil:.0f} bit/s is below the rate {rate_bps:.0f} bit/s")
    burst = lambda bps: max(MIN_BURST, int(bps / 8 * BURST_S))  # noqa: E731
    return Shaping(rate_bps, ceil, burst(rate_bps), burst(ceil))


@dataclass(frozen=True)
class NetPlan:
    """Everything one task's network consists of."""
    key: str
    mode: str                          # none | bridge
    netns: str                         # name under /run/netns
    host_if: str = ""                  # bridge mode: host end of the veth
    address: IPv4Interface | None = None
    gateway: IPv4Interface | None = None
    bridge: str = ""
    shaping: Shaping | None = None

    @property
    def netns_path(self) -> str:
        return f"{NETNS_DIR}/{self.netns}"


def plan(node: str, key: str, mode: str, address: IPv4Interface | None, gw: IPv4Interface | None,
         rate_bps: float = 0.0, ceil_bps: float = 0.0) -> NetPlan:
    if mode not in MODES or mode == "host":
        raise LaunchError(f"network mode {mode!r} has no plan; use one of none, bridge")
    shape = shaping(rate_bps, ceil_bps)
    if mode == "none":
        if shape is not None:
            raise LaunchError("a network rate needs network mode bridge (mode none has no link)")
        return NetPlan(key, mode, netns_name(node, key))
    if address is None or gw is None:
        raise LaunchError("bridge mode needs an address and a gateway")
    return NetPlan(key, mode, netns_name(node, key), host_veth(node, key), address, gw, bridge_name(node), shape)


@dataclass(frozen=True)
class NatRule:
    """--masquerade: traffic from the node subnet to anywhere outside it gets the host's
    address (tasks talking to each other or to the bridge stay unNATed). One nftables table of our own, so removing it is one call
    and no other rule of the host is touched."""
    table: str
    subnet: IPv4Network
    bridge: str

    def nft_script(self) -> str:
        """The same rule in nft(8) syntax: what `nft -f` would load (and what the VM test
        compares with `nft list table`)."""
        return (f"table ip {self.table} {{\n"
                f"\tchain postrouting {{\n"
                f"\t\ttype nat hook postrouting priority srcnat; policy accept;\n"
                f"\t\tip saddr {self.subnet} ip daddr != {self.subnet} masquerade\n"
                f"\t}}\n}}\n")


def nat_rule(node: str, subnet: IPv4Network) -> NatRule:
    return NatRule(f"tcl_{_hash(node, 8)}", subnet, bridge_name(node))
