"""Pure usage math: cumulative cgroup counters in, the reported TaskUsage out.

CPU rate is the CPU time used between the two most recent samples divided by the time
between them, as the TCluster paper does with cpuacct.usage."""

from __future__ import annotations

from tcluster.agent.runtime.base import RawUsage
from tcluster.model import TaskUsage


def cpu_rate(previous: RawUsage | None, current: RawUsage, field: str = "cpu_ns") -> float:
    """Cores used between the two samples, for the total or a split (`user_ns`, `system_ns`)."""
    if previous is None:
        return 0.0
    # Monotonic when both samples have it: an NTP step of the wall clock must not make a rate.
    elapsed = current.mono - previous.mono if current.mono and previous.mono else current.at - previous.at
    if elapsed <= 0:
        return 0.0
    return max(0.0, (getattr(current, field) - getattr(previous, field)) / 1e9 / elapsed)


def to_task_usage(previous: RawUsage | None, current: RawUsage, peak_seen: int) -> TaskUsage:
    """`peak_seen` is the highest memory the agent has sampled, for kernels without memory.peak."""
    return TaskUsage(
        cpu_seconds=current.cpu_ns / 1e9,
        cpu_rate=cpu_rate(previous, current),
        memory_bytes=current.memory_bytes,
        memory_peak_bytes=max(current.memory_peak_bytes, peak_seen, current.memory_bytes),
        memory_anon_bytes=current.anon_bytes,
        memory_file_bytes=current.file_bytes,
        memory_inactive_file_bytes=current.inactive_file_bytes,
        pids=current.pids,
        sampled_at=current.at,
        cpu_user_seconds=current.user_ns / 1e9,
        cpu_system_seconds=current.system_ns / 1e9,
        cpu_user_rate=cpu_rate(previous, current, "user_ns"),
        cpu_system_rate=cpu_rate(previous, current, "system_ns"),
        cpu_throttled_seconds=current.throttled_ns / 1e9,
        cpu_throttled_periods=current.nr_throttled,
        memory_swap_bytes=current.swap_bytes,
        io_read_bytes=current.io_read_bytes,
        io_write_bytes=current.io_write_bytes,
        oom_kills=current.oom_kills,
        pids_max_hits=current.pids_max_hits,
        net_tx_bytes=current.extra.get("net_tx_bytes", 0),
        net_rx_bytes=current.extra.get("net_rx_bytes", 0),
        net_tx_rate=_byte_rate(previous, current, "net_tx_bytes") * 8,
        net_rx_rate=_byte_rate(previous, current, "net_rx_bytes") * 8,
    )


def _byte_rate(previous: RawUsage | None, current: RawUsage, key: str) -> float:
    if previous is None or key not in current.extra or key not in previous.extra:
        return 0.0
    elapsed = current.mono - previous.mono if current.mono and previous.mono else current.at - previous.at
    return max(0.0, (current.extra[key] - previous.extra[key]) / elapsed) if elapsed > 0 else 0.0
