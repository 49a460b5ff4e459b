"""Where a task starts, checked before its container exists so that a directory the node
or the task's user cannot reach fails the start with a reason that names it and the way
out (`--workdir`), and a command not found there says where it was looked for.

The working directory is `--workdir`, else the directory `tcl submit` ran in (shared
filesystems are the norm), else (an older client) the task's private /tmp."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .base import LaunchError, TaskSpec
from .launch import DEFAULT_PATH, Identity, default_cwd, reachable

PRIVATE_TMP = ("the task's /tmp is private (its own empty directory), so nothing under the host's /tmp "
               "is visible to it")


def task_cwd(spec: TaskSpec, ident: Identity | None) -> str:
    """The directory the shim enters as the task's user; LaunchError when it cannot."""
    path = spec.workdir or spec.submit_dir
    if not path:
        return default_cwd(ident, spec.namespaces)
    origin = "--workdir" if spec.workdir else "the directory tcl submit ran in"
    if spec.namespaces and _under_tmp(path):
        raise LaunchError(f"working directory {path} ({origin}) is under /tmp, but {PRIVATE_TMP}; "
                          "submit from, or give --workdir, a directory every node shares (e.g. under /home)")
    problem = _why_unreachable(path, ident)
    if problem:
        raise LaunchError(f"working directory {path} ({origin}) {problem} on this node; "
                          "give --workdir a directory the node has and the task's user can enter")
    return path


def _under_tmp(path: str) -> bool:
    return path == "/tmp" or path.startswith("/tmp/")


def _why_unreachable(path: str, ident: Identity | None) -> str:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if not reachable(path, ident):
        name = ident.name if ident is not None else "the agent's user"
        return f"cannot be entered by the task's user {name}"
    return ""


def explain_exec_failure(message: str, spec: TaskSpec, cwd: str) -> str:
    """The shim's `exec failed: No such file or directory: './run.sh'`, followed by where the
    program was looked for (the working directory, the task's PATH) and why it may be missing."""
    if not spec.command or not any(e in message for e in ("No such file or directory", "Permission denied")):
        return message
    program = spec.command[0]
    if "/" not in program:
        path = dict(spec.env).get("PATH", DEFAULT_PATH)
        return f"{message} not found (or not executable) in the task's PATH {path[:300]}"
    if "Permission denied" in message:
        return f"{message} (the task's user must be able to enter its directories and execute it)"
    seen_here = not (spec.namespaces and _under_tmp(cwd))      # the host path is the task's
    if not program.startswith("/") and seen_here and Path(cwd, program).exists():
        return f"{message} is in {cwd}, but the interpreter named on its #! line is missing"
    where = "on this node" if program.startswith("/") else f"in the task's working directory {cwd}"
    hint = f"; {PRIVATE_TMP}" if spec.namespaces else ""
    return f"{message} not found {where}{hint}"
