"""A job's memory request and time limit as Slurm users write them, parsed in one place
for every entry point that reads a job (`tcl submit` flags, `--resources`, job files):

- memory: a bare number is MiB (`--mem 4096` is 4 GiB); K/M/G/T are Slurm's (powers of
  1024), Ki/Mi/Gi/Ti ours (the same), KB/MB/GB/TB powers of 1000, B bytes. Below 4 MiB is
  refused naming the unit (a typo, never a real task); 0 is refused: no limit is written
  `unlimited` (0 on the wire), and a node may refuse to run such a task.
- time limit: a bare number is minutes; Slurm's MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS;
  ours with units (90s, 15m, 1h30m, 2d).

Node capacities, log sizes, queue files and `tcl sim` scenarios keep units.parse_bytes
(a bare number is bytes) and units.parse_duration (a bare number is seconds)."""

from __future__ import annotations

import math
import re

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.units import format_bytes, format_duration, parse_bytes, parse_duration

MIB = 1024**2
MIN_MEMORY_BYTES = 4 * MIB
UNLIMITED = "unlimited"          # no memory limit; 0 bytes on the wire
# A file's or --resources' `memory: unlimited` until the layers are merged (cli/spec.py),
# where 0 would read as "not given" and the default would win.
UNLIMITED_MARK = -1
MEMORY_HINT = ("a bare number is MiB as in Slurm (4096 = 4 GiB); or 512M, 4G, 1.5Gi (powers of 1024), "
               "500MB, 0.5GB (powers of 1000); `unlimited` for no limit")
TIME_LIMIT_HINT = ("a bare number is minutes as in Slurm (90 = 1h30m); or Slurm's 45:00, 1:30:00, 2-00, "
                   "2-00:00:00; or 90s, 15m, 1h30m, 2d")
_BARE = re.compile(r"^\s*[0-9]*\.?[0-9]+\s*$")


def parse_memory(text: str | int | float, field: str = "memory") -> int:
    """Bytes of a task's memory request; 0 means `unlimited` (no limit)."""
    if isinstance(text, bool):
        raise InvalidArgument(field, f"{text!r} is not a size ({MEMORY_HINT})")
    if isinstance(text, str) and text.strip().lower() == UNLIMITED:
        return 0
    bare = isinstance(text, (int, float)) or bool(_BARE.match(text))
    if bare:
        number = float(text)
        if not math.isfinite(number) or number < 0:
            raise InvalidArgument(field, f"{str(text)[:40]!r} must be a size >= 4 MiB ({MEMORY_HINT})")
        size = int(round(number * MIB))
    else:
        try:
            size = parse_bytes(str(text), field)
        except InvalidArgument as exc:     # say what a good one looks like, in these units
            raise InvalidArgument(field, f"cannot parse {str(text)[:40]!r} as a size ({MEMORY_HINT})") \
                if "cannot parse" in str(exc) else exc
    shown = str(text).strip()[:40]
    if size == 0:
        raise InvalidArgument(field, f"{shown!r} is no memory at all; for no memory limit write `{UNLIMITED}` "
                                     "(a node may refuse it), else a size of at least 4 MiB")
    if size < MIN_MEMORY_BYTES:
        read_as = f"{shown} MiB (a bare number is MiB; {shown}G is GiB)" if bare else f"{size} bytes"
        raise InvalidArgument(field, f"{shown!r} is {read_as}, below the least a task can run in, 4 MiB "
                                     f"({MEMORY_HINT})")
    return size


def parse_time_limit(text: str | int | float, field: str = "time_limit") -> float:
    """Seconds of a task's time limit; a bare number is minutes (0: none)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        minutes = float(text)
    elif isinstance(text, str) and _BARE.match(text):
        minutes = float(text)
    else:
        try:
            return parse_duration(text, field)
        except InvalidArgument:
            raise InvalidArgument(field, f"cannot parse {str(text)[:40]!r} as a time limit ({TIME_LIMIT_HINT})") from None
    if not math.isfinite(minutes) or minutes < 0:
        raise InvalidArgument(field, f"{str(text)[:40]!r} must be a time limit >= 0 ({TIME_LIMIT_HINT})")
    return minutes * 60


def format_memory(size: int | float) -> str:
    """Exactly, as parse_memory reads it back: 4Gi, 1.5Gi, 1025Mi, unlimited."""
    if size <= 0:
        return UNLIMITED
    for unit, scale in (("Ti", 1024**4), ("Gi", 1024**3), ("Mi", MIB), ("Ki", 1024)):
        if size >= scale and (size * 10) % scale == 0:
            return f"{size / scale:.1f}".removesuffix(".0") + unit
    return format_bytes(size) if size % 1 else f"{int(size)}B"


def format_time_limit(seconds: float) -> str:
    return format_duration(seconds) if seconds > 0 else "none"
