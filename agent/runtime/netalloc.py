"""Task addresses from the node's subnet: a pure lease table plus a small JSON file that
keeps it across agent restarts.

The bridge holds the subnet's first host address (the tasks' gateway); every task in
`bridge` mode leases one of the others for as long as its container exists. Addresses are
handed out round-robin after the last one given, so a just-released address rests while
the rest of the subnet is used: a peer's stale ARP entry or a late packet to the old task
then finds nobody rather than the next task."""

from __future__ import annotations

import ipaddress
import json
import os
import threading
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from pathlib import Path
from typing import Iterable

from .base import LaunchError, RuntimeSetupError

DEFAULT_SUBNET = "10.88.0.0/24"
MAX_PREFIX = 29          # a /30 has room for the gateway and one task only: refused


class AddressesExhausted(LaunchError):
    """Every address of the node subnet is leased."""


def parse_subnet(text: str) -> IPv4Network:
    """An IPv4 network in CIDR form; host bits must be zero. RuntimeSetupError otherwise."""
    try:
        net = ipaddress.IPv4Network(text, strict=True)
    except ValueError as e:
        raise RuntimeSetupError(f"--net-subnet {text!r}: {e}; use CIDR like {DEFAULT_SUBNET}") from e
    if net.prefixlen > MAX_PREFIX:
        raise RuntimeSetupError(f"--net-subnet {text!r} is too small: use /{MAX_PREFIX} or larger")
    return net


def gateway(subnet: IPv4Network) -> IPv4Interface:
    """The bridge's address: the subnet's first host."""
    return IPv4Interface(f"{subnet.network_address + 1}/{subnet.prefixlen}")


@dataclass(frozen=True)
class Leases:
    subnet: IPv4Network
    by_key: dict[str, int] = field(default_factory=dict)   # key -> host index in the subnet
    last: int = 1                                            # index handed out last (1 = gateway)

    def address(self, key: str) -> IPv4Interface | None:
        index = self.by_key.get(key)
        return None if index is None else _interface(self.subnet, index)


def _interface(subnet: IPv4Network, index: int) -> IPv4Interface:
    return IPv4Interface(f"{subnet.network_address + index}/{subnet.prefixlen}")


def allocate(leases: Leases, key: str) -> tuple[Leases, IPv4Interface]:
    """The key's address: the one it holds already (a retried start), else the next free
    one after the last given. Raises AddressesExhausted."""
    held = leases.address(key)
    if held is not None:
        return leases, held
    first, end = 2, leases.subnet.num_addresses - 1      # skip network, gateway; broadcast
    span = end - first
    used = set(leases.by_key.values())
    for step in range(1, span + 1):
        index = first + (leases.last - first + step) % span
        if index not in used:
            grown = replace(leases, by_key={**leases.by_key, key: index}, last=index)
            return grown, _interface(leases.subnet, index)
    raise AddressesExhausted(f"no free address left in the node subnet {leases.subnet} "
                             f"({len(used)} tasks hold one); use a larger --net-subnet")


def release(leases: Leases, key: str) -> Leases:
    if key not in leases.by_key:
        return leases
    return replace(leases, by_key={k: v for k, v in leases.by_key.items() if k != key})


def retain(leases: Leases, keys: Iterable[str]) -> Leases:
    """After a restart: keep the leases of the containers that still exist, drop the rest."""
    alive = set(keys)
    return replace(leases, by_key={k: v for k, v in leases.by_key.items() if k in alive})


def to_json(leases: Leases) -> str:
    return json.dumps({"subnet": str(leases.subnet), "last": leases.last,
                       "leases": {k: str(leases.subnet.network_address + i) for k, i in sorted(leases.by_key.items())}},
                      indent=1)


def from_json(text: str, subnet: IPv4Network) -> Leases:
    """The table saved for `subnet`. A file for another subnet (the operator changed
    --net-subnet) or an unreadable one gives an empty table: those leases mean nothing now."""
    try:
        data = json.loads(text)
        if IPv4Network(data["subnet"]) != subnet:
            return Leases(subnet)
        by_key = {}
        for key, addr in data.get("leases", {}).items():
            index = int(IPv4Address(addr)) - int(subnet.network_address)
            if 2 <= index < subnet.num_addresses - 1:
                by_key[str(key)] = index
        last = int(data.get("last", 1))
    except (ValueError, KeyError, TypeError, AttributeError):
        return Leases(subnet)
    return Leases(subnet, by_key, last if 1 <= last < subnet.num_addresses - 1 else 1)


class LeaseFile:
    """The lease table on disk (written atomically after every change). The agent starts
    and removes tasks from several threads at once, hence the lock."""

    def __init__(self, path: Path, subnet: IPv4Network) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self._leases = from_json(self.path.read_text(), subnet)
        except OSError:
            self._leases = Leases(subnet)

    @property
    def leases(self) -> Leases:
        return self._leases

    def allocate(self, key: str) -> IPv4Interface:
        with self._lock:
            leases, addr = allocate(self._leases, key)
            self._store(leases)
            return addr

    def release(self, key: str) -> None:
        with self._lock:
            self._store(release(self._leases, key))

    def retain(self, keys: Iterable[str]) -> None:
        with self._lock:
            self._store(retain(self._leases, keys))

    def _store(self, leases: Leases) -> None:
        if leases == self._leases and self.path.exists():
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as f:
            f.write(to_json(leases))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._leases = leases
