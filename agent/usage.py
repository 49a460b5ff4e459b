"""Pure usage math: cumulative cgroup counters in, the reported TaskUsage out.

CPU rate is the CPU time used between the two most recent samples divided by the time
between them, as the TCluster paper does with cpuacct.usage."""

from __future__ import annotations

from tcluster.agent.runtime.base import RawUsage
from tcluster.model import TaskUsage


def cpu_rate(previous: RawUsage | None, current: RawUsage) -> float:
    if previous is None or current.at <= previous.at:
        return 0.0
    return max(0.0, (current.cpu_ns - previous.cpu_ns) / 1e9 / (current.at - previous.at))


def to_task_usage(previous: RawUsage | None, current: RawUsage, peak_seen: int) -> TaskUsage:
    """`peak_seen` is the highest memory the agent has sampled, for kernels without memory.peak."""
    return TaskUsage(
        cpu_seconds=current.cpu_ns / 1e9,
        cpu_rate=cpu_rate(previous, current),
        memory_bytes=current.memory_bytes,
        memory_peak_bytes=max(current.memory_peak_bytes, peak_seen, current.memory_bytes),
        memory_anon_bytes=current.anon_bytes,
        memory_file_bytes=current.file_bytes,
        pids=current.pids,
        sampled_at=current.at,
    )
