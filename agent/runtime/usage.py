"""Usage counters from the text of cgroup files. Pure: the backends read the files into a
{name: text} map (missing files simply absent) and these functions build the RawUsage."""

from __future__ import annotations

from typing import Mapping

from .base import RawUsage
from .cgfs import parse_flat_keyed

NS_PER_S = 1_000_000_000

V1_FILES = (
    ("cpuacct", "cpuacct.usage"), ("cpuacct", "cpuacct.stat"), ("cpu", "cpu.stat"),
    ("memory", "memory.usage_in_bytes"), ("memory", "memory.max_usage_in_bytes"),
    ("memory", "memory.stat"), ("memory", "memory.oom_control"),
    ("pids", "pids.current"), ("pids", "pids.events"),
)
V2_FILES = ("cpu.stat", "memory.current", "memory.peak", "memory.stat", "memory.events",
            "pids.current", "pids.events")


def _int(text: str | None) -> int:
    word = (text or "").strip()
    return int(word) if word.isdigit() else 0     # "max", "" or absent -> 0


def _keyed(files: Mapping[str, str], name: str) -> dict[str, int]:
    return parse_flat_keyed(files.get(name, ""))


def oom_kills_v1(oom_control: str) -> int:
    """The `oom_kill` line of memory.oom_control (kernel >= 4.13; 0 when absent)."""
    return parse_flat_keyed(oom_control).get("oom_kill", 0)


def oom_kills_v2(memory_events: str) -> int:
    return parse_flat_keyed(memory_events).get("oom_kill", 0)


def usage_v1(files: Mapping[str, str], at: float, clk_tck: int) -> RawUsage:
    """cpuacct.stat counts USER_HZ ticks; the total (cpuacct.usage) is already in ns."""
    ticks = _keyed(files, "cpuacct.stat")
    mem = _keyed(files, "memory.stat")
    throttle = _keyed(files, "cpu.stat")
    return RawUsage(
        at=at,
        cpu_ns=_int(files.get("cpuacct.usage")),
        user_ns=ticks.get("user", 0) * NS_PER_S // clk_tck,
        system_ns=ticks.get("system", 0) * NS_PER_S // clk_tck,
        memory_bytes=_int(files.get("memory.usage_in_bytes")),
        memory_peak_bytes=_int(files.get("memory.max_usage_in_bytes")),
        anon_bytes=mem.get("rss", 0),
        file_bytes=mem.get("cache", 0),
        pids=_int(files.get("pids.current")),
        oom_kills=oom_kills_v1(files.get("memory.oom_control", "")),
        extra={"nr_throttled": throttle.get("nr_throttled", 0),
               "throttled_ns": throttle.get("throttled_time", 0),
               "pids_max_hits": _keyed(files, "pids.events").get("max", 0)},
    )


def usage_v2(files: Mapping[str, str], at: float) -> RawUsage:
    """cpu.stat is in microseconds. memory.peak exists from kernel 5.19; before that it is
    0 here and the agent keeps the highest memory.current it sampled."""
    cpu = _keyed(files, "cpu.stat")
    mem = _keyed(files, "memory.stat")
    return RawUsage(
        at=at,
        cpu_ns=cpu.get("usage_usec", 0) * 1000,
        user_ns=cpu.get("user_usec", 0) * 1000,
        system_ns=cpu.get("system_usec", 0) * 1000,
        memory_bytes=_int(files.get("memory.current")),
        memory_peak_bytes=_int(files.get("memory.peak")),
        anon_bytes=mem.get("anon", 0),
        file_bytes=mem.get("file", 0),
        pids=_int(files.get("pids.current")),
        oom_kills=oom_kills_v2(files.get("memory.events", "")),
        extra={"nr_throttled": cpu.get("nr_throttled", 0),
               "throttled_ns": cpu.get("throttled_usec", 0) * 1000,
               "pids_max_hits": _keyed(files, "pids.events").get("max", 0)},
    )
