"""Per-GPU usage of running tasks (NVML's utilization and framebuffer memory of each
device, attributed to the task the device is bound to), and its forms: the wire
(common.proto GpuUsage), the JSON views (`gpu_usage` of a task, absent without NVML) and
DCGM-named Prometheus series. Kept beside TaskUsage, not in its field table: a task has
one row per device, and only where NVML is read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

MIB = 2**20
# (series, help, value of a sample): named as NVIDIA's DCGM exporter names them, so its
# dashboards' queries work (FB in MiB, as DCGM reports it).
DCGM_SERIES: tuple[tuple[str, str, Any], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %), of the task bound to the device",
     lambda s: s.util_percent),
    ("DCGM_FI_DEV_FB_USED", "framebuffer memory used (in MiB), of the task bound to the device",
     lambda s: s.memory_used_bytes / MIB),
    ("DCGM_FI_DEV_FB_FREE", "framebuffer memory free (in MiB)",
     lambda s: max(0, s.memory_total_bytes - s.memory_used_bytes) / MIB),
)
# The same samples under tcluster's own names, in base units (what /metrics exports by default).
TASK_GPU_SERIES: tuple[tuple[str, str, Any], ...] = (
    ("tcluster_task_gpu_utilization_ratio", "GPU utilization (0-1) of the device bound to the task",
     lambda s: s.util_percent / 100),
    ("tcluster_task_gpu_memory_used_bytes", "GPU memory used on the device bound to the task",
     lambda s: s.memory_used_bytes),
    ("tcluster_task_gpu_memory_free_bytes", "GPU memory free on the device bound to the task",
     lambda s: max(0, s.memory_total_bytes - s.memory_used_bytes)),
)
MAX_PER_HEARTBEAT = 1024


@dataclass(frozen=True)
class GpuSample:
    task_id: str
    attempt: int
    index: int                   # the node's GPU index
    util_percent: float
    memory_used_bytes: int
    memory_total_bytes: int


def gpu_json(samples: Iterable[GpuSample]) -> list[dict[str, Any]]:
    return [{"gpu": s.index, "util_percent": s.util_percent, "memory_used_bytes": s.memory_used_bytes,
             "memory_total_bytes": s.memory_total_bytes} for s in sorted(samples, key=lambda s: s.index)]


class GpuBoard:
    """The master's last GPU samples per node, replaced by each heartbeat (no history):
    read by `tcl status` and /metrics. A node that sends none has none."""

    def __init__(self) -> None:
        self._by_node: dict[str, tuple[GpuSample, ...]] = {}

    def update(self, node: str, samples: tuple[GpuSample, ...]) -> None:
        if samples:
            self._by_node[node] = samples
        else:
            self._by_node.pop(node, None)

    def forget(self, node: str) -> None:
        self._by_node.pop(node, None)

    def of_task(self, node: str, task_id: str, attempt: int) -> tuple[GpuSample, ...]:
        return tuple(s for s in self._by_node.get(node, ()) if s.task_id == task_id and s.attempt == attempt)

    def items(self) -> list[tuple[str, GpuSample]]:
        return [(node, s) for node, samples in sorted(self._by_node.items()) for s in samples]
