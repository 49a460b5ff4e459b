"""One node's task networks: the bridge, the address leases and, per task, a plan that
netns.py applies. This is what a runtime (or the agent) calls around a task's life:

    nets = TaskNetworks(node, state_dir, "10.88.0.0/24", masquerade=False)
    nets.setup(keep=live_keys)              # agent start: bridge up, sweep the rest
    plan = nets.prepare(spec)               # before start: netns + veth + HTB (None: host)
    nets.attach(spec, pid)                  # docker: wire the container's own namespace
    nets.release(key)                       # after the container is gone
    nets.counters(key)                      # heartbeat: bytes sent / received
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable

from . import netns
from .base import LaunchError, TaskSpec
from .netalloc import DEFAULT_SUBNET, LeaseFile, gateway, parse_subnet
from .netplan import NetPlan, nat_rule, plan

log = logging.getLogger(__name__)
LEASE_FILE = "net-leases.json"


class TaskNetworks:
    def __init__(self, node: str, state_dir: Path, subnet: str = DEFAULT_SUBNET, masquerade: bool = False) -> None:
        self.node = node
        self.subnet = parse_subnet(subnet)
        self.gateway = gateway(self.subnet)
        self.masquerade = masquerade
        self._leases = LeaseFile(Path(state_dir) / LEASE_FILE, self.subnet)

    def setup(self, keep: Iterable[str] = ()) -> None:
        """Bridge up with the gateway address; everything of a task not in `keep` removed;
        leases of those tasks released. Safe to call on every agent start."""
        alive = set(keep)
        netns.ensure_bridge(self.node, self.gateway)
        swept = netns.sweep(self.node, alive)
        if swept:
            log.info("removed the networks of tasks that are gone: %s", ", ".join(swept))
        # A lease stays only with a namespace that still exists (after the sweep: a kept one).
        self._leases.retain(netns.node_namespaces(self.node))
        if self.masquerade:
            netns.install_masquerade(nat_rule(self.node, self.subnet))

    def plan(self, spec: TaskSpec) -> NetPlan | None:
        """The task's plan (leasing an address in bridge mode); None for host networking."""
        if spec.network in ("", "host"):
            if spec.net_rate_bps or spec.net_ceil_bps:
                raise LaunchError("a network rate needs network mode bridge (host networking is shared)")
            return None
        address = self._leases.allocate(spec.key) if spec.network == "bridge" else None
        try:
            return plan(self.node, spec.key, spec.network, address, self.gateway, spec.net_rate_bps,
                        spec.net_ceil_bps)
        except LaunchError:
            self._leases.release(spec.key)
            raise

    def prepare(self, spec: TaskSpec) -> NetPlan | None:
        """A new named namespace for a native task, wired. Spawn the task with
        `netns.run_in_netns(plan.netns_path, ...)`."""
        return self._wire(spec, None)

    def attach(self, spec: TaskSpec, pid: int) -> NetPlan | None:
        """Name and wire the namespace the process `pid` already lives in (a docker
        container started with network_mode=none)."""
        return self._wire(spec, pid)

    def _wire(self, spec: TaskSpec, pid: int | None) -> NetPlan | None:
        p = self.plan(spec)
        if p is None:
            return None
        try:
            netns.create_netns(p.netns, pid)
            netns.wire(p)
        except BaseException as e:
            self.release(spec.key)
            if isinstance(e, OSError):
                raise LaunchError(f"cannot create the task's network namespace: {e}") from e
            raise
        return p

    def release(self, key: str) -> None:
        """Remove the task's namespace, veth and qdisc, and free its address. Idempotent."""
        netns.unwire(self.node, key)
        self._leases.release(key)

    def counters(self, key: str) -> netns.NetCounters | None:
        return netns.counters(self.node, key)

    def address(self, key: str) -> str | None:
        addr = self._leases.leases.address(key)
        return None if addr is None else str(addr.ip)

    def close(self) -> None:
        """Drop the bridge (and the NAT rule) once no task is on it; tasks left running
        keep both for the next agent."""
        if netns.remove_bridge(self.node) and self.masquerade:
            netns.remove_masquerade(nat_rule(self.node, self.subnet))
