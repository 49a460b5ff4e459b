"""Talking to the shim: resolve the task's user, write its spec, spawn the shim and read
its one `started`/`error` line, find a running shim again after an agent restart, and
read the exit record it leaves behind."""

from __future__ import annotations

import json
import os
import pwd
import select
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tcluster.daemonkit.sdnotify import SYSTEMD_ONLY_ENV

from .base import LaunchError, TaskSpec

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_TIMEOUT_S = 30.0
HOSTNAME_MAX = 64


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
    task_pid: int          # the container's first process (its init with namespaces)
    started_at: float


@dataclass(frozen=True)
class ShimFiles:
    """Where one container's shim reads and writes, all in its state directory."""
    spec: Path
    exit: Path
    log: Path
    cwd: str
    tmp: Path | None       # bound on /tmp in the task's mount namespace


def resolve_user(user: str) -> Identity | None:
    """None for "" (run as the agent's user). A name or a numeric uid otherwise."""
    if not user:
        return None
    try:
        pw = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        raise LaunchError(f"user {user!r} does not exist on this node") from None
    groups = tuple(sorted(set(os.getgrouplist(pw.pw_name, pw.pw_gid))))
    return Identity(pw.pw_uid, pw.pw_gid, groups, pw.pw_name, pw.pw_dir)


def _own_identity() -> Identity:
    uid = os.geteuid()
    try:
        return resolve_user(str(uid)) or Identity(uid, os.getegid(), (), str(uid), "/")
    except LaunchError:          # the agent's uid has no passwd entry (e.g. in a container)
        return Identity(uid, os.getegid(), (), str(uid), "/")


def default_cwd(ident: Identity | None, namespaces: bool) -> str:
    """Where a task without a workdir starts. With namespaces: its private /tmp, by the
    path it sees (the shim resolves cwd after binding it). Without: its home if the user
    can reach it, else "/" (a host path under the agent's state dir is not reachable)."""
    if namespaces:
        return "/tmp"
    home = (ident or _own_identity()).home
    return home if reachable(home, ident) else "/"


def reachable(path: str, ident: Identity | None) -> bool:
    """Can `ident` (None: the agent's own user) enter `path`: is every directory from /
    down to it searchable by its mode bits? ACLs are not read: the shim's chdir, done as
    the task's user, is the final word and fails the start with a clear reason."""
    p = Path(path)
    if not p.is_absolute():
        return False
    for d in (*reversed(p.parents), p):
        try:
            st = os.stat(d)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode):
            return False
        if ident is None or ident.uid == 0:
            continue                   # root searches any directory
        if st.st_uid == ident.uid:
            bit = stat.S_IXUSR
        elif st.st_gid == ident.gid or st.st_gid in ident.groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def task_env(spec: TaskSpec, ident: Identity | None) -> dict[str, str]:
    """A clean environment: nothing leaks from the agent's; the task's own vars win."""
    if ident is None:
        ident = _own_identity()
    env = {"PATH": DEFAULT_PATH, "HOME": ident.home, "USER": ident.name, "LOGNAME": ident.name}
    if spec.namespaces:
        env["HOSTNAME"] = spec.task_id[:HOSTNAME_MAX]
    env.update(dict(spec.env))
    for name in SYSTEMD_ONLY_ENV:   # even if the job carries them: a task must not talk to the agent's systemd
        env.pop(name, None)
    return env


def shim_spec(spec: TaskSpec, ident: Identity | None, files: ShimFiles, cgroup_procs: list[str]) -> bytes:
    """NUL-separated key/value pairs (shim.c's format): trivial to parse in C, and any
    byte but NUL may appear in an argument or a variable."""
    if not spec.command:
        raise LaunchError("the task has an empty command")
    pairs: list[tuple[str, str]] = [("argv", a) for a in spec.command]
    pairs += [("env", f"{k}={v}") for k, v in task_env(spec, ident).items()]
    pairs += [("procs", p) for p in cgroup_procs]
    pairs += [("cwd", files.cwd), ("stdout", spec.stdout_path), ("stderr", spec.stderr_path),
              ("exit", str(files.exit))]
    if ident is not None:
        pairs += [("uid", str(ident.uid)), ("gid", str(ident.gid))] + [("group", str(g)) for g in ident.groups]
    if spec.namespaces:
        pairs += [("ns", "1"), ("hostname", spec.task_id[:HOSTNAME_MAX])]
        if files.tmp is not None:
            pairs.append(("tmp", str(files.tmp)))
    pairs += _output_pairs(spec)
    if spec.lease_path:
        pairs.append(("lease", spec.lease_path))
    if spec.log_max_bytes > 0:
        # The shim copies the output through pipes and rotates <file> to <file>.1 at the cap.
        pairs.append(("log_max", str(spec.log_max_bytes)))
    if any("\0" in k or "\0" in v for k, v in pairs):
        raise LaunchError("the command or environment contains a NUL byte")
    return b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in pairs)


def _output_pairs(spec: TaskSpec) -> list[tuple[str, str]]:
    """The user's output files and the script (shim.c opens them as the task's user)."""
    pairs = [(key, value) for key, value in (("ostdout", spec.stdout_file), ("ostderr", spec.stderr_file),
                                             ("script", spec.script)) if value]
    if spec.output_append:
        pairs.append(("oappend", "1"))
    return pairs


def write_private(path: Path, data: bytes) -> None:
    """0600 and atomic: the spec holds the task's environment (secrets, often)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
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


def spawn_shim(binary: Path, spec_path: Path, shim_log: Path, timeout: float = START_TIMEOUT_S) -> ShimLaunch:
    """Start the shim in its own session (a terminal's Ctrl-C and the agent's death never
    reach it) and wait for its one line. On failure the shim has been waited for (so its
    task is gone too) and LaunchError says why."""
    with open(shim_log, "ab", opener=lambda p, f: os.open(p, f, 0o600)) as log:
        proc = subprocess.Popen(
            [str(binary), str(spec_path)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
            bufsize=0, close_fds=True, start_new_session=True, env={"PATH": DEFAULT_PATH}, cwd="/")
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


def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot): with the pid, it names one
    process for good, so a recycled pid is never mistaken for our shim."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def open_live_pidfd(pid: int, start_time: int | None) -> int | None:
    """A pidfd for `pid` if it is still the very process that was recorded, else None."""
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return None
    # Checked after opening: from here on the fd pins this process, whatever the pid does.
    now = process_start_time(pid)
    if now is None or (start_time is not None and now != start_time):
        os.close(fd)
        return None
    return fd
