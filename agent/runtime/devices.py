"""Which device nodes a task may open, computed as data. Pure: the v1 backend writes the
rules to devices.deny / devices.allow (`v1_device_limits`), the v2 backend turns them into
a BPF_PROG_TYPE_CGROUP_DEVICE program (devbpf.py).

The policy is an allow list, like runc's default: every character and block device is
denied except the standard ones a process expects (/dev/null, zero, full, random,
urandom, tty, console, ptmx, the pts terminals), mknod of any node (the kernel still
needs CAP_MKNOD, and opening it is what is checked), the shared GPU control nodes
(nvidiactl, nvidia-uvm, ...) and the task's own GPUs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

CHAR, BLOCK, ALL = "c", "b", "a"
ANY = -1                           # a wildcard major or minor ('*')


@dataclass(frozen=True)
class DeviceRule:
    kind: str                      # c, b, or a (both)
    major: int = ANY
    minor: int = ANY
    access: str = "rwm"            # some of r (read), w (write), m (mknod)

    def v1_text(self) -> str:
        """The line devices.allow takes: `c 1:3 rwm`, `b *:* m`, `a`."""
        if self.kind == ALL:
            return "a"
        major = "*" if self.major == ANY else str(self.major)
        minor = "*" if self.minor == ANY else str(self.minor)
        return f"{self.kind} {major}:{minor} {self.access}"


# runc's default allow list (libcontainer/specconv AllowedDevices), without the tun device.
STANDARD: tuple[DeviceRule, ...] = (
    DeviceRule(CHAR, ANY, ANY, "m"),
    DeviceRule(BLOCK, ANY, ANY, "m"),
    DeviceRule(CHAR, 1, 3),        # /dev/null
    DeviceRule(CHAR, 1, 5),        # /dev/zero
    DeviceRule(CHAR, 1, 7),        # /dev/full
    DeviceRule(CHAR, 1, 8),        # /dev/random
    DeviceRule(CHAR, 1, 9),        # /dev/urandom
    DeviceRule(CHAR, 5, 0),        # /dev/tty
    DeviceRule(CHAR, 5, 1),        # /dev/console
    DeviceRule(CHAR, 5, 2),        # /dev/ptmx
    DeviceRule(CHAR, 136, ANY),    # /dev/pts/*
)
# Opened by every CUDA process whatever its GPUs: allowed to each task on a GPU node.
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


def task_rules(own: Iterable[tuple[int, int]], shared: Iterable[tuple[int, int]] = ()) -> tuple[DeviceRule, ...]:
    """The allow list of a task: the standard devices, the shared control nodes and its own
    GPUs, each a (major, minor) character device. Duplicates dropped, order kept."""
    extra = [DeviceRule(CHAR, major, minor) for major, minor in [*shared, *own]]
    return tuple(dict.fromkeys([*STANDARD, *extra]))


def v1_device_limits(rules: tuple[DeviceRule, ...]) -> list[tuple[str, str, str]]:
    """[(controller, file, value)] for the task's devices group: deny everything, then
    allow each rule (one write per line: the kernel takes one rule per write)."""
    return [("devices", "devices.deny", "a")] + [("devices", "devices.allow", r.v1_text()) for r in rules]


def allows(rules: tuple[DeviceRule, ...], kind: str, major: int, minor: int, access: str) -> bool:
    """What the kernel will decide for an open (or mknod) under these rules: the reference
    the BPF program and the v1 lines are tested against."""
    for rule in rules:
        if rule.kind not in (ALL, kind):
            continue
        if rule.major not in (ANY, major) or rule.minor not in (ANY, minor):
            continue
        if set(access) <= set(rule.access):
            return True
    return False
