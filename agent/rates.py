"""Pure usage math: cumulative cgroup counters in, the reported TaskUsage out. The one
place a rate is derived (CPU, throttling, I/O, network): the agent has every counter and
the exact interval between its samples; the master only reads the rates it is sent.

A rate is a counter's growth between the two most recent samples divided by the time
between them, as the TCluster paper does with cpuacct.usage."""

from __future__ import annotations

from operator import attrgetter
from typing import Callable

from tcluster.agent.runtime.base import RawUsage
from tcluster.domain.model import TaskUsage

NS_PER_S = 1e9
Count = Callable[[RawUsage], "float | None"]    # a counter of a sample; None where the sample lacks it


def per_second(previous: RawUsage | None, current: RawUsage, count: Count) -> float:
    """The counter's growth per second between the samples: 0 for a first sample, where
    either lacks the counter, or where no time passed; never below 0."""
    if previous is None:
        return 0.0
    before, after = count(previous), count(current)
    # Monotonic when both samples have it: an NTP step of the wall clock must not make a rate.
    elapsed = current.mono - previous.mono if current.mono and previous.mono else current.at - previous.at
    if before is None or after is None or elapsed <= 0:
        return 0.0
    return max(0.0, (after - before) / elapsed)


def cpu_rate(previous: RawUsage | None, current: RawUsage, field: str = "cpu_ns") -> float:
    """Cores used between the two samples, for the total or a split (`user_ns`, `system_ns`)."""
    return per_second(previous, current, attrgetter(field)) / NS_PER_S


def to_task_usage(previous: RawUsage | None, current: RawUsage, peak_seen: int) -> TaskUsage:
    """`peak_seen` is the highest memory the agent has sampled, for kernels without memory.peak."""
    return TaskUsage(
        cpu_seconds=current.cpu_ns / NS_PER_S,
        cpu_rate=cpu_rate(previous, current),
        memory_bytes=current.memory_bytes,
        memory_peak_bytes=max(current.memory_peak_bytes, peak_seen, current.memory_bytes),
        memory_anon_bytes=current.anon_bytes,
        memory_file_bytes=current.file_bytes,
        memory_inactive_file_bytes=current.inactive_file_bytes,
        pids=current.pids,
        sampled_at=current.at,
        cpu_user_seconds=current.user_ns / NS_PER_S,
        cpu_system_seconds=current.system_ns / NS_PER_S,
        cpu_user_rate=cpu_rate(previous, current, "user_ns"),
        cpu_system_rate=cpu_rate(previous, current, "system_ns"),
        cpu_throttled_seconds=current.throttled_ns / NS_PER_S,
        cpu_throttled_periods=current.nr_throttled,
        cpu_throttled_rate=cpu_rate(previous, current, "throttled_ns"),
        memory_swap_bytes=current.swap_bytes,
        io_read_bytes=current.io_read_bytes,
        io_write_bytes=current.io_write_bytes,
        io_read_rate=per_second(previous, current, attrgetter("io_read_bytes")),
        io_write_rate=per_second(previous, current, attrgetter("io_write_bytes")),
        oom_kills=current.oom_kills,
        pids_max_hits=current.pids_max_hits,
        net_tx_bytes=current.net_tx_bytes or 0,
        net_rx_bytes=current.net_rx_bytes or 0,
        net_tx_rate=per_second(previous, current, attrgetter("net_tx_bytes")) * 8,     # bits/s
        net_rx_rate=per_second(previous, current, attrgetter("net_rx_bytes")) * 8,
    )
