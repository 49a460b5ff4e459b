"""Shared daemon plumbing: logging setup, settings checks and errors, and running until a signal."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Callable, Sequence

from pydantic import BaseModel, ValidationError

from tcluster.daemonkit import logsetup
from tcluster.domain.errors import InvalidArgument


def setup_logging(level: str = "INFO", log_format: str = "text") -> None:
    """The daemons' logging (tcluster/daemonkit/logsetup.py: journald priorities, JSON lines)."""
    logsetup.setup_logging(level, log_format)


def explain_settings_error(prog: str, error: ValidationError,
                           origin: Callable[[str], str | None] = lambda name: None) -> str:
    """One line per bad setting, named as its command-line flag, or as FILE:LINE: key when
    `origin` says the value came from the config file (tcluster/daemonkit/configfile.py)."""
    lines = []
    for item in error.errors():
        name = "_".join(str(p) for p in item["loc"])
        where = origin(name) or "--" + name.replace("_", "-")
        lines.append(f"{prog}: {where}: {item['msg'].removeprefix('Value error, ')}")
    return "\n".join(lines)


def explain_argument_error(prog: str, error: InvalidArgument, origin: Callable[[str], str | None]) -> str:
    """An InvalidArgument that names a flag (`--memory: ...`), reworded as FILE:LINE: key
    when that flag's value came from the config file."""
    dest = error.field.lstrip("-").replace("-", "_")
    where = origin(dest) if error.field.startswith("--") else None
    if where is None:
        return f"{prog}: {error}"
    return f"{prog}: {where}: {str(error).removeprefix(error.field + ': ')}"


def changed_settings(old: BaseModel, new: BaseModel) -> list[str]:
    """The names of the settings whose values differ (a reload's diff)."""
    return [name for name in type(old).model_fields if getattr(old, name) != getattr(new, name)]


def set_log_level(level: str) -> None:
    logging.getLogger().setLevel(logsetup.log_level_arg(level))


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
