"""Plain text forms every front end shares: timestamps, signal names, aligned tables. Light
on purpose (no job model): `tcl status` prints with these before anything else loads."""

from __future__ import annotations

import signal
from datetime import datetime, timezone
from functools import lru_cache
from typing import Sequence


def signal_name(number: int) -> str | None:
    """9 -> 'SIGKILL'; None for 0 (no signal)."""
    if not number:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


def timestamp(seconds: float) -> str | None:
    """Unix seconds -> '2026-11-22T10:00:00.123Z'; 0 (proto 'unset') -> None."""
    if not seconds:
        return None
    whole, ms = divmod(round(seconds * 1000), 1000)
    return f"{_second(whole)}.{ms:03d}Z"


@lru_cache(maxsize=64)
def _second(whole: int) -> str:
    """Hot on the dashboard (a job page of 1,000 tasks every 2 s): most share a second."""
    return f"{datetime.fromtimestamp(whole, tz=timezone.utc):%Y-%m-%dT%H:%M:%S}"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart; the last column is not padded."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row)]
    lines = []
    for row in [list(headers), *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
