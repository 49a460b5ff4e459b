"""Usage counters from the text of cgroup files. Pure: the backends read the files into a
{name: text} map (missing files simply absent) and these functions build the RawUsage."""

from __future__ import annotations

from typing import Mapping

from .base import RawUsage
from .cgfs import flat_values

NS_PER_S = 1_000_000_000

V1_FILES = (
    ("cpuacct", "cpuacct.usage"), ("cpuacct", "cpuacct.stat"), ("cpu", "cpu.stat"),
    ("memory", "memory.usage_in_bytes"), ("memory", "memory.max_usage_in_bytes"),
    ("memory", "memory.memsw.usage_in_bytes"),
    ("memory", "memory.stat"), ("memory", "memory.oom_control"),
    ("pids", "pids.current"), ("pids", "pids.events"),
    ("blkio", "blkio.throttle.io_service_bytes_recursive"),
)
V2_FILES = ("cpu.stat", "memory.current", "memory.peak", "memory.swap.current", "memory.stat",
            "memory.events", "pids.current", "pids.events", "io.stat")


def _int(text: str | None) -> int:
    word = (text or "").strip()
    return int(word) if word.isdigit() else 0     # "max", "" or absent -> 0


def _keyed(files: Mapping[str, str], name: str, keys: tuple[str, ...]) -> dict[str, int]:
    return flat_values(files.get(name, ""), keys)


def oom_kills_v1(oom_control: str) -> int:
    """The `oom_kill` line of memory.oom_control (kernel >= 4.13; 0 when absent)."""
    return flat_values(oom_control, ("oom_kill",)).get("oom_kill", 0)


def oom_kills_v2(memory_events: str) -> int:
    return flat_values(memory_events, ("oom_kill",)).get("oom_kill", 0)


def io_v2(io_stat: str) -> tuple[int, int]:
    """(read, written) bytes summed over devices: lines `MAJ:MIN rbytes=N wbytes=N ...`."""
    read = written = 0
    for line in io_stat.splitlines():
        for field in line.split()[1:]:
            key, _, value = field.partition("=")
            if value.isdigit():
                read += int(value) if key == "rbytes" else 0
                written += int(value) if key == "wbytes" else 0
    return read, written


def io_v1(service_bytes: str) -> tuple[int, int]:
    """(read, written) from blkio.throttle.io_service_bytes: `MAJ:MIN Read N` lines."""
    read = written = 0
    for line in service_bytes.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].isdigit():
            read += int(parts[2]) if parts[1] == "Read" else 0
            written += int(parts[2]) if parts[1] == "Write" else 0
    return read, written


def usage_v1(files: Mapping[str, str], at: float, clk_tck: int, mono: float = 0.0) -> RawUsage:
    """cpuacct.stat counts USER_HZ ticks; the total (cpuacct.usage) is already in ns."""
    ticks = _keyed(files, "cpuacct.stat", ("user", "system"))
    mem = _keyed(files, "memory.stat", ("rss", "cache", "total_inactive_file", "inactive_file"))
    throttle = _keyed(files, "cpu.stat", ("throttled_time", "nr_throttled"))
    memory = _int(files.get("memory.usage_in_bytes"))
    memsw = _int(files.get("memory.memsw.usage_in_bytes"))
    read, written = io_v1(files.get("blkio.throttle.io_service_bytes_recursive", ""))
    return RawUsage(
        at=at,
        mono=mono,
        cpu_ns=_int(files.get("cpuacct.usage")),
        user_ns=ticks.get("user", 0) * NS_PER_S // clk_tck,
        system_ns=ticks.get("system", 0) * NS_PER_S // clk_tck,
        memory_bytes=memory,
        memory_peak_bytes=_int(files.get("memory.max_usage_in_bytes")),
        anon_bytes=mem.get("rss", 0),
        file_bytes=mem.get("cache", 0),
        # total_: the hierarchical figure, as memory.usage_in_bytes counts the whole subtree
        inactive_file_bytes=mem.get("total_inactive_file", mem.get("inactive_file", -1)),
        pids=_int(files.get("pids.current")),
        oom_kills=oom_kills_v1(files.get("memory.oom_control", "")),
        throttled_ns=throttle.get("throttled_time", 0),
        nr_throttled=throttle.get("nr_throttled", 0),
        swap_bytes=max(0, memsw - memory) if memsw else 0,
        io_read_bytes=read,
        io_write_bytes=written,
        pids_max_hits=_keyed(files, "pids.events", ("max",)).get("max", 0),
    )


def usage_v2(files: Mapping[str, str], at: float, mono: float = 0.0) -> RawUsage:
    """cpu.stat is in microseconds. memory.peak exists from kernel 5.19 (for non-root
    groups in some later kernels only); without it this is 0 and the agent keeps the
    highest memory.current it sampled."""
    cpu = _keyed(files, "cpu.stat", ("usage_usec", "user_usec", "system_usec", "throttled_usec", "nr_throttled"))
    mem = _keyed(files, "memory.stat", ("anon", "file", "inactive_file"))
    read, written = io_v2(files.get("io.stat", ""))
    return RawUsage(
        at=at,
        mono=mono,
        cpu_ns=cpu.get("usage_usec", 0) * 1000,
        user_ns=cpu.get("user_usec", 0) * 1000,
        system_ns=cpu.get("system_usec", 0) * 1000,
        memory_bytes=_int(files.get("memory.current")),
        memory_peak_bytes=_int(files.get("memory.peak")),
        anon_bytes=mem.get("anon", 0),
        file_bytes=mem.get("file", 0),
        inactive_file_bytes=mem.get("inactive_file", -1),
        pids=_int(files.get("pids.current")),
        oom_kills=oom_kills_v2(files.get("memory.events", "")),
        throttled_ns=cpu.get("throttled_usec", 0) * 1000,
        nr_throttled=cpu.get("nr_throttled", 0),
        swap_bytes=_int(files.get("memory.swap.current")),
        io_read_bytes=read,
        io_write_bytes=written,
        pids_max_hits=_keyed(files, "pids.events", ("max",)).get("max", 0),
    )
