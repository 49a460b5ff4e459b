"""CPU and memory of a process from /proc (Linux)."""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_times(text: str) -> tuple[int, int]:
    fields = text.rpartition(")")[2].split()
    return int(fields[11]), int(fields[12])          # utime, stime (fields 14 and 15)


def cpu_seconds(pid: int) -> float:
    """user + system CPU of the whole process (all threads)."""
    try:
        utime, stime = _stat_times(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, IndexError, ValueError):
        return 0.0
    return (utime + stime) / _TICK


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU by thread name (threads of one name summed): the Python loop vs gRPC's threads."""
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            utime, stime = _stat_times(Path(f"/proc/{pid}/task/{tid}/stat").read_text())
        except (OSError, IndexError, ValueError):
            continue
        key = "main" if tid == str(pid) else name
        out[key] = out.get(key, 0.0) + (utime + stime) / _TICK
    return out


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot: the others' load too."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    total = sum(fields[:8])
    return (total - idle) / _TICK, total / _TICK
