"""Cgroup limits of a task, computed as data. Pure: a writer applies them to a cgroup root.

CPU is shared by weight, proportional to the request (1 core = the kernel's default weight:
100 in v2, 1024 in v1), with an optional hard cap; memory is a hard limit with swap off
unless the task asked for some; pids.max keeps a fork bomb inside its container."""

from __future__ import annotations

import math

from .base import LaunchError, TaskSpec

CPU_PERIOD_US = 100_000
MIN_QUOTA_US = 1_000          # the kernel refuses CFS quotas under 1 ms
V2_WEIGHT_RANGE = (1, 10_000)
V1_SHARES_RANGE = (2, 262_144)
V2_IO_WEIGHT_RANGE = (1, 10_000)
V1_BLKIO_WEIGHT_RANGE = (10, 1_000)
UNLIMITED_SWAP = -1


def _clamp(value: int, bounds: tuple[int, int]) -> int:
    return max(bounds[0], min(bounds[1], value))


def request_cores(spec: TaskSpec) -> float:
    """The task's CPU request in cores, refusing a request or cap that is not finite."""
    cpu = spec.resources.cpu
    if not math.isfinite(cpu) or not math.isfinite(spec.cpu_limit):
        raise LaunchError(f"cpu request {cpu!r} / cap {spec.cpu_limit!r} must be finite")
    return max(0.0, cpu)


# CPU and I/O are shared in proportion to the CPU request; each interface has its own scale.
def v2_cpu_weight(cores: float) -> int:
    return _clamp(round(cores * 100), V2_WEIGHT_RANGE)


def v2_io_weight(cores: float) -> int:
    return _clamp(round(cores * 100), V2_IO_WEIGHT_RANGE)


def v1_cpu_shares(cores: float) -> int:
    """cpu.shares (also docker's cpu_shares)."""
    return _clamp(round(cores * 1024), V1_SHARES_RANGE)


def v1_blkio_weight(cores: float) -> int:
    """blkio.weight (also docker's blkio_weight)."""
    return _clamp(round(cores * 500), V1_BLKIO_WEIGHT_RANGE)


def cpu_quota_us(cores: float) -> int:
    """The CFS quota per CPU_PERIOD_US for a cap of `cores`."""
    return max(MIN_QUOTA_US, round(cores * CPU_PERIOD_US))


def _pids_max(spec: TaskSpec) -> str:
    # 0 (or less) means "no pids limit"; the kernel spells that "max" in v1 and v2.
    return str(spec.pids_max) if spec.pids_max > 0 else "max"


def v2_limits(spec: TaskSpec, swap_file: bool = True, io_file: bool = False) -> list[tuple[str, str]]:
    """[(file, value)] for the task's cgroup v2 directory, in write order. `swap_file` is
    False when the kernel has no memory.swap.max (swap accounting off); `io_file` is True
    when the group has io.weight (an I/O scheduler that honours weights)."""
    cpu = request_cores(spec)
    out = [("cpu.weight", str(v2_cpu_weight(cpu)))]
    if spec.cpu_limit > 0:
        out.append(("cpu.max", f"{cpu_quota_us(spec.cpu_limit)} {CPU_PERIOD_US}"))
    if spec.resources.memory > 0:
        out.append(("memory.max", str(spec.resources.memory)))
    if swap_file:
        # Written even without a memory limit: swap stays off unless the task asked for it.
        swap = "max" if spec.swap_bytes == UNLIMITED_SWAP else str(max(0, spec.swap_bytes))
        out.append(("memory.swap.max", swap))
    out.append(("pids.max", _pids_max(spec)))
    if io_file:
        # I/O is shared like CPU: in proportion to the task's CPU request.
        out.append(("io.weight", f"default {v2_io_weight(cpu)}"))
    return out


def v1_limits(spec: TaskSpec, memsw: bool = True, blkio: str = "") -> list[tuple[str, str, str]]:
    """[(controller, file, value)] for the task's v1 groups, in write order. `memsw` is False
    when memory.memsw.limit_in_bytes does not exist (swap accounting off); `blkio` names the
    weight file the blkio hierarchy offers (blkio.weight, or blkio.bfq.weight), if any."""
    cpu = request_cores(spec)
    out = [("cpu", "cpu.shares", str(v1_cpu_shares(cpu)))]
    if spec.cpu_limit > 0:
        # Period first: the quota is checked against the period in force.
        out.append(("cpu", "cpu.cfs_period_us", str(CPU_PERIOD_US)))
        out.append(("cpu", "cpu.cfs_quota_us", str(cpu_quota_us(spec.cpu_limit))))
    memory = spec.resources.memory
    if memory > 0:
        # The limit before memsw: the kernel refuses memsw below the memory limit in force.
        out.append(("memory", "memory.limit_in_bytes", str(memory)))
        if memsw:
            total = "-1" if spec.swap_bytes == UNLIMITED_SWAP else str(memory + max(0, spec.swap_bytes))
            out.append(("memory", "memory.memsw.limit_in_bytes", total))
    out.append(("pids", "pids.max", _pids_max(spec)))
    if blkio:
        out.append(("blkio", blkio, str(v1_blkio_weight(cpu))))
    return out
