"""Shared daemon plumbing: logging setup, settings checks and errors, and running until a signal."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Sequence

from pydantic import ValidationError


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def explain_settings_error(prog: str, error: ValidationError) -> str:
    """One line per bad setting, named as its command-line flag."""
    lines = []
    for item in error.errors():
        flag = "--" + "-".join(str(p) for p in item["loc"]).replace("_", "-")
        lines.append(f"{prog}: {flag}: {item['msg'].removeprefix('Value error, ')}")
    return "\n".join(lines)


def one_of(value: str, choices: Sequence[str], what: str = "") -> str:
    """A settings validator's check of a named choice: `value`, or a ValueError that lists the
    choices (`unknown WHAT 'x'; choose one of: …`, or `'x' is not one of: …` without `what`)."""
    if value in choices:
        return value
    listed = ", ".join(choices)
    raise ValueError(f"unknown {what} {value!r}; choose one of: {listed}" if what else f"{value!r} is not one of: {listed}")


async def wait_for_stop_signal() -> None:
    """Returns on the first SIGINT or SIGTERM."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
