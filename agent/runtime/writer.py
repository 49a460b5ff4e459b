"""Apply limits computed by `limits` to cgroup files. The cgroup root is a parameter, so
tests point it at a temporary directory."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Iterable, Mapping

from .base import LaunchError

_HINTS = {
    errno.ENOENT: " (no such file: is the controller enabled for this cgroup?)",
    errno.EINVAL: " (value out of range for this kernel)",
    errno.EBUSY: " (the group's current usage is above the new limit)",
}


def write_file(path: Path, value: str) -> None:
    """One write(2) of the whole value: cgroupfs reports a refusal from that very call.
    No O_CREAT: a missing interface file is an error, never a new regular file."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _apply(path: Path, value: str) -> None:
    try:
        write_file(path, value)
    except OSError as e:
        hint = _HINTS.get(e.errno or 0, "")
        raise LaunchError(f"cgroup refused {value!r} for {path}: {e.strerror or e}{hint}") from e


def write_v2(cgroup_dir: Path, values: Iterable[tuple[str, str]]) -> None:
    for name, value in values:
        _apply(cgroup_dir / name, value)


def write_v1(dirs: Mapping[str, Path], values: Iterable[tuple[str, str, str]]) -> None:
    """`dirs` maps a controller to the task's directory in that controller's hierarchy."""
    for controller, name, value in values:
        _apply(dirs[controller] / name, value)
