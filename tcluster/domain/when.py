"""Points in time as `tcl report --since/--until` and `tcl history --since` take them,
in Slurm's forms (sacct -S/-E): `2026-11-01`, `2026-11-01T08:00[:00]`, `now`, `now-7days`,
`now-2hours`, `today`, `midnight`, `yesterday`, `now-90m` (any tcl duration after `now-`),
or unix seconds. Pure: `now` and the time zone are inputs (the CLI passes the local one)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone, tzinfo

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.units import parse_duration

WHEN_HINT = ("e.g. 2026-11-01, 2026-11-01T08:00, now, now-7days, now-2hours, today, yesterday "
             "or unix seconds")
# Slurm's words after now[+-]: seconds, minutes, hours, days, weeks (singular too)
_SLURM_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}
_RELATIVE = re.compile(r"^now\s*([+-])\s*(.+)$")
_SLURM_AMOUNT = re.compile(r"^(\d+(?:\.\d+)?)\s*(second|minute|hour|day|week)s?$")
_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S")


def parse_when(text: str, now: float, tz: tzinfo | None = None, field: str = "since") -> float:
    """Unix seconds of `text`; InvalidArgument naming `field` if it is none of the forms."""
    value = text.strip().lower()
    zone = tz or timezone.utc
    if value == "now":
        return now
    if value in ("today", "midnight", "yesterday"):
        start = datetime.fromtimestamp(now, zone).replace(hour=0, minute=0, second=0, microsecond=0)
        return (start - timedelta(days=value == "yesterday")).timestamp()
    if re.fullmatch(r"\d+(\.\d+)?", value) and len(value.split(".")[0]) > 8:
        return float(value)                       # unix seconds (a date has dashes)
    relative = _RELATIVE.match(value)
    if relative is not None:
        sign = -1.0 if relative.group(1) == "-" else 1.0
        return now + sign * _amount(relative.group(2).strip(), text, field)
    for form in _FORMATS:
        try:
            return datetime.strptime(text.strip(), form).replace(tzinfo=zone).timestamp()
        except ValueError:
            continue
    raise InvalidArgument(field, f"cannot read {text[:40]!r} as a time ({WHEN_HINT})")


def _amount(text: str, whole: str, field: str) -> float:
    slurm = _SLURM_AMOUNT.match(text)
    if slurm is not None:
        return float(slurm.group(1)) * _SLURM_UNITS[slurm.group(2)]
    try:
        return parse_duration(text, field)
    except InvalidArgument:
        raise InvalidArgument(field, f"cannot read {whole[:40]!r} as a time ({WHEN_HINT})") from None


def check_period(since: float, until: float) -> None:
    if until <= since:
        raise InvalidArgument("until", f"must be after --since (got since {since:.0f}, until {until:.0f})")
