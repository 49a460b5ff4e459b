"""Talking to the shim: resolve the task's user, write its spec JSON, spawn the shim and
read its one `started`/`error` line, read the exit record it leaves behind."""

from __future__ import annotations

import json
import os
import pwd
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import LaunchError, TaskSpec

SHIM_PATH = Path(__file__).resolve().parent.parent / "shim.py"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str
    home: str


@dataclass(frozen=True)
class ShimLaunch:
    proc: subprocess.Popen[bytes]
    task_pid: int
    started_at: float


def resolve_user(user: str) -> Identity | None:
    """None for "" (run as the agent's user). A name or a numeric uid otherwise."""
    if not user:
        return None
    try:
        pw = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        raise LaunchError(f"user {user!r} does not exist") from None
    groups = tuple(sorted(set(os.getgrouplist(pw.pw_name, pw.pw_gid))))
    return Identity(pw.pw_uid, pw.pw_gid, groups, pw.pw_name, pw.pw_dir)


def _own_identity() -> Identity:
    uid = os.geteuid()
    try:
        return resolve_user(str(uid)) or Identity(uid, os.getegid(), (), str(uid), "/")
    except LaunchError:          # the agent's uid has no passwd entry (e.g. in a container)
        return Identity(uid, os.getegid(), (), str(uid), "/")


def task_env(spec: TaskSpec, ident: Identity | None) -> dict[str, str]:
    """A clean environment: nothing leaks from the agent's; the task's own vars win."""
    if ident is None:
        ident = _own_identity()
    env = {"PATH": DEFAULT_PATH, "HOME": ident.home, "USER": ident.name, "LOGNAME": ident.name}
    env.update(dict(spec.env))
    return env


def shim_spec(spec: TaskSpec, ident: Identity | None, cwd: str,
              cgroup_procs: list[str], exit_path: Path) -> dict[str, Any]:
    if not spec.command:
        raise LaunchError("the task has an empty command")
    return {
        "argv": list(spec.command), "env": task_env(spec, ident), "cwd": cwd,
        "uid": ident.uid if ident else None, "gid": ident.gid if ident else None,
        "groups": list(ident.groups) if ident else None,
        "cgroup_procs": cgroup_procs, "stdout": spec.stdout_path, "stderr": spec.stderr_path,
        "exit_path": str(exit_path),
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    assert proc.stdout is not None
    fd, buf = proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise LaunchError(f"the task supervisor did not report within {timeout:.0f} s")
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace").split("\n", 1)[0].strip()


def _tail(path: Path, limit: int = 400) -> str:
    try:
        return " ".join(path.read_text(errors="replace")[-limit:].split())
    except OSError:
        return ""


def _parse_started(line: str) -> tuple[int, float] | None:
    parts = line.split()
    if len(parts) == 3 and parts[0] == "started" and parts[1].isdigit():
        return int(parts[1]), float(parts[2])
    return None


def spawn_shim(spec_path: Path, shim_log: Path, timeout: float = START_TIMEOUT_S) -> ShimLaunch:
    """Start the shim in its own session and wait for its one line. On failure the shim
    has been waited for (so its task is gone too) and LaunchError says why."""
    with open(shim_log, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-S", str(SHIM_PATH), str(spec_path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, bufsize=0,
            close_fds=True, start_new_session=True, env={"PATH": DEFAULT_PATH})
    try:
        line = _read_line(proc, timeout)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        assert proc.stdout is not None
        proc.stdout.close()
    started = _parse_started(line)
    if started is not None:
        return ShimLaunch(proc, started[0], started[1])
    _wait_briefly(proc)
    if line.startswith("error "):
        raise LaunchError(line[len("error "):])
    raise LaunchError(f"the task supervisor failed: {line or _tail(shim_log) or 'no output'}")


def _wait_briefly(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def read_exit_record(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
