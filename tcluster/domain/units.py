"""Human quantities, parsed once at the edge: sizes (`512Mi`, `0.5GB`), CPU counts,
bandwidths (`10Mbit`), and the TCluster paper's resource form
(`cpu_num=0.5; memory=0.5GB`)."""

from __future__ import annotations

import math
import re

from tcluster.domain.errors import InvalidArgument

_BYTE_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    # K/M/G/T alone are Slurm's (powers of 1024, `--mem 4G` is 4 GiB); KB/MB/GB/TB are SI.
    "k": 1024, "kb": 1000, "m": 1024**2, "mb": 1000**2,
    "g": 1024**3, "gb": 1000**3, "t": 1024**4, "tb": 1000**4,
    "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2,
    "gi": 1024**3, "gib": 1024**3, "ti": 1024**4, "tib": 1024**4,
}
_BIT_UNITS: dict[str, int] = {
    "": 1, "bit": 1, "bps": 1,
    "kbit": 1000, "kbps": 1000, "mbit": 1000**2, "mbps": 1000**2,
    "gbit": 1000**3, "gbps": 1000**3,
}
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def _split(text: str, field: str) -> tuple[float, str]:
    match = _QUANTITY.match(str(text))
    if not match:
        raise InvalidArgument(field, f"cannot parse {text!r} as a non-negative number with an optional unit")
    number = float(match.group(1))
    if not math.isfinite(number):
        raise InvalidArgument(field, f"{text!r} is not a finite number")
    return number, match.group(2)


def parse_bytes(text: str | int | float, field: str = "memory") -> int:
    """`512Mi` -> 536870912; `0.5GB` -> 500000000; a bare number is bytes."""
    if isinstance(text, bool):
        raise InvalidArgument(field, f"{text!r} is not a size")
    if isinstance(text, (int, float)):
        if not math.isfinite(text) or text < 0:
            raise InvalidArgument(field, f"{text!r} must be a finite size >= 0")
        return int(text)
    number, unit = _split(text, field)
    factor = _BYTE_UNITS.get(unit.lower())
    if factor is None:
        allowed = ("B, K/Ki/KiB, M/Mi/MiB, G/Gi/GiB, T/Ti/TiB (powers of 1024, K/M/G/T as in Slurm), "
                   "KB, MB, GB, TB (powers of 1000)")
        raise InvalidArgument(field, f"unknown size unit {unit!r} in {text!r}; allowed: {allowed}")
    return int(round(number * factor))


def parse_bits(text: str | int | float, field: str = "net") -> float:
    """`10Mbit` -> 1e7 bits/s."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if not math.isfinite(text) or text < 0:
            raise InvalidArgument(field, f"{text!r} must be a finite rate >= 0")
        return float(text)
    number, unit = _split(str(text), field)
    factor = _BIT_UNITS.get(unit.lower())
    if factor is None:
        raise InvalidArgument(field, f"unknown bandwidth unit {unit!r} in {text!r}; allowed: bit, kbit, mbit, gbit")
    return number * factor


def parse_cpu(text: str | int | float, field: str = "cpu") -> float:
    """Cores, fractional: `0.5`, `2`, or millicores `500m`."""
    if isinstance(text, bool):
        raise InvalidArgument(field, f"{text!r} is not a CPU count")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        number, unit = _split(text, field)
        if unit not in ("", "m"):
            raise InvalidArgument(field, f"unknown CPU unit {unit!r} in {text!r}; use cores (0.5) or millicores (500m)")
        value = number / 1000 if unit == "m" else number
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(field, f"{text!r} must be a finite number of cores >= 0")
    return value


def format_bytes(n: int | float) -> str:
    """Binary units, short: 536870912 -> '512Mi'."""
    value = float(n)
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if abs(value) < 1024 or unit == "Ti":
            text = f"{value:.1f}".rstrip("0").rstrip(".") if unit else str(int(value))
            return f"{text}{unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_cpu(cores: float) -> str:
    return f"{cores:.3f}".rstrip("0").rstrip(".") or "0"


_DURATION_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(s|sec|min|m|h|d)")
_CLOCK = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")   # Slurm's D-HH:MM:SS, HH:MM:SS, MM:SS
DURATION_HINT = "e.g. 90 (seconds), 30s, 15m, 2h, 1d, 1h30m or Slurm's 1-00:00:00, 2:00:00, 45:00"


def parse_duration(text: str | int | float, field: str = "duration") -> float:
    """Seconds from `90`, `90s`, `15m`, `2h`, `1d`, `1h30m`, or Slurm's clock forms."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        seconds = _duration_text(str(text).strip().lower(), field)
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgument(field, f"{str(text)[:40]!r} must be a duration >= 0 ({DURATION_HINT})")
    return seconds


def _duration_text(text: str, field: str) -> float:
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    clock = _CLOCK.match(text) if (":" in text or "-" in text) else None
    if clock is not None:
        days, first, *rest = clock.groups()
        fields = [int(first), *(int(r) for r in rest if r is not None)]
        if days is not None:        # D-HH, D-HH:MM, D-HH:MM:SS
            fields += [0] * (3 - len(fields))
        elif len(fields) == 2:      # MM:SS
            fields = [0, *fields]
        hours, minutes, secs = fields
        return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + secs
    parts = _DURATION_PART.findall(text)
    if parts and "".join(a + u for a, u in parts) == text.replace(" ", ""):
        return sum(float(amount) * _DURATION_UNITS[unit] for amount, unit in parts)
    raise InvalidArgument(field, f"cannot parse {text[:40]!r} as a duration ({DURATION_HINT})")


def format_duration(seconds: float) -> str:
    """2h, 1h30m, 45s: the shortest exact form."""
    if seconds <= 0:
        return "0s"
    whole = int(round(seconds))
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if whole >= size:
            out += f"{whole // size}{unit}"
            whole %= size
    return out or f"{seconds:g}s"
