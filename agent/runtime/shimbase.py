"""What every shim-based backend shares: the start flow (user, spec, shim, pidfd),
re-adoption after an agent restart, the exit record, and the per-container state
directory. A backend fills in how a container's cgroups are made, killed, measured and
destroyed."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from .base import ExitStatus, LaunchError, RuntimeSetupError, Started, TaskSpec
from .cgfs import is_safe_name
from .launch import (Identity, ShimFiles, ShimLaunch, open_live_pidfd, process_start_time,
                     read_exit_record, resolve_user, shim_spec, spawn_shim, write_private)
from .shimbin import shim_binary
from .workdir import explain_exec_failure, task_cwd

log = logging.getLogger(__name__)

SPEC_FILE = "shim.spec"
EXIT_FILE = "exit.json"
SHIM_LOG = "shim.log"
TASK_PID_FILE = "task.pid"
SHIM_PID_FILE = "shim.pid"          # "<pid> <start time>": survives pid reuse
TMP_DIR = "tmp"
REAP_TIMEOUT_S = 5.0


class ShimRuntime:
    name = "shim"

    def __init__(self, state_dir: Path, namespaces: bool = True) -> None:
        self._state_dir = Path(state_dir)
        self._namespaces = namespaces
        self._binary: Path | None = None
        # Shims we spawned (our children): kept so they can be reaped, never left zombies.
        self._shims: dict[str, subprocess.Popen[bytes]] = {}

    # -- what a backend provides ------------------------------------------------------
    def _prepare(self, spec: TaskSpec) -> list[str]:
        """Create the container's cgroups with limits; return the cgroup.procs paths."""
        raise NotImplementedError

    def _kill_all(self, key: str) -> None:
        """SIGKILL every process of the container so that none can escape by forking."""
        raise NotImplementedError

    def _destroy(self, key: str) -> None:
        """Kill every process of the container and delete its cgroups. Idempotent."""
        raise NotImplementedError

    def _oom_kills(self, key: str) -> int:
        return 0

    # -- the shared flow --------------------------------------------------------------
    def setup_shim(self) -> None:
        try:
            self._binary = shim_binary()
        except OSError as e:
            raise RuntimeSetupError(f"cannot prepare the task supervisor: {e}") from e
        (self._state_dir / "containers").mkdir(mode=0o700, parents=True, exist_ok=True)

    def container_dir(self, key: str) -> Path:
        return self._state_dir / "containers" / key

    def start(self, spec: TaskSpec) -> Started:
        if not is_safe_name(spec.key):
            raise LaunchError(f"container key {spec.key!r} must use only A-Za-z0-9_.-")
        if self._binary is None:
            self.setup_shim()
        spec = spec if self._namespaces else _without_namespaces(spec)
        ident = resolve_user(spec.user)       # before any cgroup exists: nothing to undo
        cwd = task_cwd(spec, ident)
        cdir = self.container_dir(spec.key)
        if (cdir / SPEC_FILE).exists():
            raise LaunchError(f"container {spec.key} already exists ({cdir})")
        files = self._make_dirs(spec, cdir, ident, cwd)
        procs = self._prepare(spec)
        try:
            write_private(files.spec, shim_spec(spec, ident, files, procs))
            assert self._binary is not None
            launch = spawn_shim(self._binary, files.spec, files.log)
        except BaseException as e:
            self._discard(spec.key)
            if isinstance(e, OSError):
                raise LaunchError(f"cannot start the task supervisor: {e}") from e
            if isinstance(e, LaunchError) and str(e).startswith("exec failed"):
                raise LaunchError(explain_exec_failure(str(e), spec, cwd)) from e
            raise
        self._shims[spec.key] = launch.proc
        return self._started(spec.key, launch)

    def _make_dirs(self, spec: TaskSpec, cdir: Path, ident: Identity | None, cwd: str) -> ShimFiles:
        """The container's state directory, 0700: it holds the spec (the task's environment)
        and the exit record. With namespaces also the task's private /tmp, owned by its
        user and 0700 like a home: other tasks' users cannot look in."""
        tmp = cdir / TMP_DIR if spec.namespaces else None
        try:
            cdir.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(cdir, 0o700)            # mkdir's mode went through the umask
            if tmp is not None:
                tmp.mkdir(mode=0o700, exist_ok=True)
                if ident is not None:
                    os.chown(tmp, ident.uid, ident.gid)
                os.chmod(tmp, 0o700)
        except OSError as e:
            raise LaunchError(f"cannot create the state directory {cdir}: {e.strerror}") from e
        return ShimFiles(cdir / SPEC_FILE, cdir / EXIT_FILE, cdir / SHIM_LOG, cwd, tmp)

    def _started(self, key: str, launch: ShimLaunch) -> Started:
        cdir = self.container_dir(key)
        try:
            # On disk, so an agent restarted later can find the task and its shim again.
            (cdir / TASK_PID_FILE).write_text(str(launch.task_pid))
            start_time = process_start_time(launch.proc.pid)
            (cdir / SHIM_PID_FILE).write_text(f"{launch.proc.pid} {start_time or ''}".strip())
            # pidfd of our unreaped child: valid even if the shim has already exited.
            exit_fd = os.pidfd_open(launch.proc.pid)
        except OSError as e:
            self._discard(key)
            raise LaunchError(f"cannot track the started task {key}: {e}") from e
        return Started(launch.proc.pid, launch.started_at, exit_fd)

    def adopt(self, key: str) -> Started | None:
        """Watch the shim of a container found on disk. None once it has ended (or was
        never recorded): exit_status() reads its record then."""
        cdir = self.container_dir(key)
        if not is_safe_name(key) or (cdir / EXIT_FILE).exists():
            return None
        try:
            words = (cdir / SHIM_PID_FILE).read_text().split()
            pid, start_time = int(words[0]), (int(words[1]) if len(words) > 1 else None)
        except (OSError, ValueError, IndexError):
            return None
        fd = open_live_pidfd(pid, start_time)
        if fd is None:
            return None
        try:
            started_at = (cdir / TASK_PID_FILE).stat().st_mtime
        except OSError:
            started_at = time.time()
        return Started(pid, started_at, fd)

    def exit_status(self, key: str) -> ExitStatus:
        shim_rc = self._reap(key, kill=False, timeout=1.0)
        record = read_exit_record(self.container_dir(key) / EXIT_FILE)
        kills = self._oom_kills(key)
        if record is None:
            if key in self._shims:
                why = "the task is still running (exit_status before its exit_fd was readable)"
            else:
                why = "the task supervisor ended without recording the task's exit"
                why += f" (supervisor exit status {shim_rc})" if shim_rc is not None else ""
            return ExitStatus(None, 0, time.time(), kills > 0, "OOMKilled" if kills else why)
        code = record.get("exit_code")
        sig = int(record.get("signal") or 0)
        reason = ""
        if record.get("fenced"):
            reason = (f"cut off from the master for {float(record.get('silence_s') or 0):.0f}s; the task's "
                      "supervisor stopped it at the fence (no agent renewed the lease): it may run elsewhere")
        if kills:
            reason = ("OOMKilled" if sig == signal.SIGKILL
                      else f"the OOM killer killed {kills} process(es) of the task")
        return ExitStatus(code if isinstance(code, int) else None, sig,
                          float(record.get("finished_at") or 0.0), kills > 0, reason, bool(record.get("fenced")))

    def signal(self, key: str, signum: int) -> None:
        if not is_safe_name(key):
            return
        if signum == signal.SIGKILL:
            self._kill_all(key)
        else:
            self._signal_each(key, signum)

    def _signal_each(self, key: str, signum: int) -> None:
        raise NotImplementedError

    def remove(self, key: str) -> None:
        if not is_safe_name(key):
            return
        self._destroy(key)
        self._reap(key)            # its task is gone, so the shim ends right away
        self._remove_state(key)

    def task_pid(self, key: str) -> int | None:
        """The container's first process (kept on disk for re-adoption)."""
        try:
            return int((self.container_dir(key) / TASK_PID_FILE).read_text())
        except (OSError, ValueError):
            return None

    # -- helpers ----------------------------------------------------------------------
    def _reap(self, key: str, kill: bool = True, timeout: float = REAP_TIMEOUT_S) -> int | None:
        """Wait (bounded) for a shim we spawned; None if it is not our child or, without
        `kill`, still running. Killing is for a shim whose task is already gone."""
        proc = self._shims.get(key)
        if proc is None:
            return None
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            if not kill:
                return None
            log.warning("shim %d of %s still running %.0f s after its task; killing it",
                        proc.pid, key, timeout)
            proc.kill()
            rc = proc.wait()
        del self._shims[key]
        return rc

    def _discard(self, key: str) -> None:
        """Undo a start that failed: best effort, the launch error is what matters."""
        try:
            self._destroy(key)
        except OSError as e:
            log.warning("cleanup after a failed start of %s: %s", key, e)
        self._reap(key)
        self._remove_state(key)

    def _remove_state(self, key: str) -> None:
        # The whole container directory is ours (the task's logs live elsewhere).
        shutil.rmtree(self.container_dir(key), ignore_errors=True)


def _without_namespaces(spec: TaskSpec) -> TaskSpec:
    return replace(spec, namespaces=False)


__all__ = ["Identity", "ShimRuntime"]
