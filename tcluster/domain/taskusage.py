"""A task's resource usage (`TaskUsage`) and its one field table.

Each field is declared once, here, with what every form of it needs: its unit, whether the
JSON views show it (`usage_json`: `tcl -o json` and the dashboard's API, under the field's
own name), its Prometheus series, and the history column it feeds. The protobuf message
(proto/tcluster/v1/common.proto TaskUsage) spells every field the same way; a unit test
fails when a proto field has no entry here. wire.py, views.py, master/usage/metrics.py and
master/usage/history.py read `USAGE_FIELDS` instead of listing fields of their own.

The agent makes one TaskUsage per sample, in one place (agent/rates.py `to_task_usage`):
the runtime's counters and levels as read, every rate derived there against the agent's
previous sample of the same container. Nothing downstream derives a rate, except the
master's fallback for agents of the previous version, which sent no throttling and I/O
rates (master/usage/ingest.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

MEAN, MAX = 0, 1              # how a history bucket aggregates a column: rates averaged, levels' peaks kept
NOT_SENT = -1                 # an optional figure its sender did not read or derive (older agents)


@dataclass(frozen=True)
class Metric:
    """A per-task Prometheus series: `tcluster_task_<name>` (+ `_total` for a counter)."""
    name: str
    help: str
    counter: bool = False


@dataclass(frozen=True)
class Column:
    """A column of the usage history (master/usage/history.TASK), at `index` in its rows."""
    index: int
    name: str
    agg: int                  # MEAN or MAX


@dataclass(frozen=True)
class UsageField:
    """One row of the table. `json`: shown by the JSON views; `wire`: a proto field."""
    name: str
    unit: str
    json: bool = True
    wire: bool = True
    metric: Metric | None = None
    column: Column | None = None


def _figure(default: float, unit: str, json: bool = True, metric: Metric | None = None,
            column: Column | None = None) -> Any:
    return field(default=default, metadata={"usage": UsageField("", unit, json, True, metric, column)})


@dataclass(frozen=True)
class TaskUsage:
    cpu_seconds: float = _figure(0.0, "s", metric=Metric("cpu_usage_seconds", "CPU time used by the task's container",
                                                         True))
    cpu_rate: float = _figure(0.0, "cores")
    memory_bytes: int = _figure(0, "bytes")
    memory_peak_bytes: int = _figure(0, "bytes", metric=Metric("memory_max_usage_bytes", "peak memory usage"))
    memory_anon_bytes: int = _figure(0, "bytes", metric=Metric("memory_rss_bytes", "anonymous memory (RSS)"),
                                     column=Column(4, "memory_anon", MAX))
    memory_file_bytes: int = _figure(0, "bytes", metric=Metric("memory_cache_bytes", "page cache"),
                                     column=Column(5, "memory_cache", MAX))
    pids: int = _figure(0, "count", metric=Metric("pids", "processes and threads in the container"),
                        column=Column(7, "pids", MAX))
    sampled_at: float = _figure(0.0, "unix s")
    cpu_user_seconds: float = _figure(0.0, "s", metric=Metric("cpu_user_seconds", "CPU time in user mode", True))
    cpu_system_seconds: float = _figure(0.0, "s", metric=Metric("cpu_system_seconds", "CPU time in kernel mode", True))
    cpu_user_rate: float = _figure(0.0, "cores")
    cpu_system_rate: float = _figure(0.0, "cores")
    cpu_throttled_seconds: float = _figure(0.0, "s", metric=Metric(
        "cpu_throttled_seconds", "time the CFS quota held the container back", True))
    cpu_throttled_periods: int = _figure(0, "count")
    memory_swap_bytes: int = _figure(0, "bytes", metric=Metric("memory_swap_bytes", "swap used"),
                                     column=Column(6, "memory_swap", MAX))
    io_read_bytes: int = _figure(0, "bytes")
    io_write_bytes: int = _figure(0, "bytes")
    oom_kills: int = _figure(0, "count")
    pids_max_hits: int = _figure(0, "count")
    net_tx_bytes: int = _figure(0, "bytes")
    net_rx_bytes: int = _figure(0, "bytes")
    net_tx_rate: float = _figure(0.0, "bits/s")
    net_rx_rate: float = _figure(0.0, "bits/s")
    # -1 (NOT_SENT): not reported (older agents, the process runtime); unset on the wire
    memory_inactive_file_bytes: int = _figure(NOT_SENT, "bytes", json=False)
    # Rates of the cumulative counters above, over the agent's last sample interval, sent as
    # a group (RATES) marked by `rates_derived`; NOT_SENT from agents of the previous version.
    # The JSON views leave them out: their shape is a public interface.
    cpu_throttled_rate: float = _figure(float(NOT_SENT), "s/s", json=False, column=Column(2, "cpu_throttled", MEAN))
    io_read_rate: float = _figure(float(NOT_SENT), "bytes/s", json=False, column=Column(8, "io_read", MEAN))
    io_write_rate: float = _figure(float(NOT_SENT), "bytes/s", json=False, column=Column(9, "io_write", MEAN))

    @property
    def working_set_bytes(self) -> int:
        return working_set(self.memory_bytes, self.memory_inactive_file_bytes, self.memory_file_bytes)

    @property
    def rates_derived(self) -> bool:
        """Whether the sender derived the RATES (on the wire: the field of this name)."""
        return self.cpu_throttled_rate >= 0 and self.io_read_rate >= 0 and self.io_write_rate >= 0


def working_set(memory: int, inactive_file: int, file: int) -> int:
    """memory.current minus inactive file pages, as cAdvisor and the kubelet count it;
    without that figure (NOT_SENT), minus all page cache (a lower bound that never counts
    cache). The one definition: the master's usage blocks call it for each sample."""
    return max(0, memory - (inactive_file if inactive_file >= 0 else file))


# Figures computed from the fields: in the table for their series, column or wire field.
# The history's CPU total is cpu_rate (cpuacct.usage / cpu.stat usage_usec, the counter
# Prometheus sees); the tick-based system rate only splits it.
_DERIVED = (UsageField("cpu_user", "cores", json=False, wire=False, column=Column(0, "cpu_user", MEAN)),
            UsageField("cpu_system", "cores", json=False, wire=False, column=Column(1, "cpu_system", MEAN)),
            UsageField("working_set_bytes", "bytes", json=False, wire=False,
                       metric=Metric("memory_working_set_bytes",
                                     "memory usage minus inactive page cache (what the OOM killer weighs)"),
                       column=Column(3, "memory_working_set", MAX)),
            UsageField("rates_derived", "bool", json=False))

USAGE_FIELDS: tuple[UsageField, ...] = tuple(
    replace(f.metadata["usage"], name=f.name) for f in fields(TaskUsage)) + _DERIVED
# The usage history's columns, in the order of its rows (master/usage/history.TASK)
HISTORY_COLUMNS: tuple[UsageField, ...] = tuple(sorted((f for f in USAGE_FIELDS if f.column is not None),
                                                       key=lambda f: f.column.index if f.column else 0))
FIELD_TYPES: dict[str, type] = {f.name: float if f.type == "float" else int for f in fields(TaskUsage)}
RATES = ("cpu_throttled_rate", "io_read_rate", "io_write_rate")
# Optional on the wire: an unset field reads 0 from protobuf, NOT_SENT in the domain.
OPTIONAL = tuple(f.name for f in fields(TaskUsage) if f.default == NOT_SENT and f.name not in RATES)


# No usage yet: one shared instance (it is frozen) for rows made in bulk, such as an
# array's tasks as they are placed; TaskUsage() costs more than the rest of a Task.
NO_USAGE = TaskUsage()
