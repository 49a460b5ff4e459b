"""What every shim-based backend shares: the start flow (user, spec JSON, shim, pidfd),
the exit record, and the per-container state directory. A backend fills in how a
container's cgroups are made, measured and destroyed."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path

from .base import ExitStatus, LaunchError, Started, TaskSpec
from .cgfs import is_safe_name
from .launch import ShimLaunch, read_exit_record, resolve_user, shim_spec, spawn_shim, write_json

log = logging.getLogger(__name__)

SPEC_FILE = "spec.json"
EXIT_FILE = "exit.json"
SHIM_LOG = "shim.log"
TASK_PID_FILE = "task.pid"
SHIM_PID_FILE = "shim.pid"
_STATE_FILES = (SPEC_FILE, SPEC_FILE + ".tmp", EXIT_FILE, EXIT_FILE + ".tmp", SHIM_LOG, TASK_PID_FILE,
                SHIM_PID_FILE)
REAP_TIMEOUT_S = 5.0


class ShimRuntime:
    name = "shim"

    def __init__(self, state_dir: Path) -> None:
        self._state_dir = Path(state_dir)
        # Shims we spawned (our children): kept so they can be reaped, never left zombies.
        self._shims: dict[str, subprocess.Popen[bytes]] = {}

    # -- what a backend provides ------------------------------------------------------
    def _prepare(self, spec: TaskSpec) -> list[str]:
        """Create the container's cgroups with limits; return the cgroup.procs paths."""
        raise NotImplementedError

    def _destroy(self, key: str) -> None:
        """Kill every process of the container and delete its cgroups. Idempotent."""
        raise NotImplementedError

    def _oom_kills(self, key: str) -> int:
        return 0

    def _on_started(self, key: str, task_pid: int) -> None:
        pass

    # -- the shared flow --------------------------------------------------------------
    def container_dir(self, key: str) -> Path:
        return self._state_dir / "containers" / key

    def start(self, spec: TaskSpec) -> Started:
        if not is_safe_name(spec.key):
            raise LaunchError(f"container key {spec.key!r} must use only A-Za-z0-9_.-")
        ident = resolve_user(spec.user)       # before any cgroup exists: nothing to undo
        cdir = self.container_dir(spec.key)
        if (cdir / SPEC_FILE).exists():
            raise LaunchError(f"container {spec.key} already exists ({cdir})")
        try:
            cdir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LaunchError(f"cannot create the state directory {cdir}: {e.strerror}") from e
        procs = self._prepare(spec)
        try:
            doc = shim_spec(spec, ident, spec.workdir or str(cdir), procs, cdir / EXIT_FILE)
            write_json(cdir / SPEC_FILE, doc)
            launch = spawn_shim(cdir / SPEC_FILE, cdir / SHIM_LOG)
        except BaseException as e:
            self._discard(spec.key)
            if isinstance(e, OSError):
                raise LaunchError(f"cannot start the task supervisor: {e}") from e
            raise
        self._shims[spec.key] = launch.proc
        return self._started(spec.key, launch)

    def _started(self, key: str, launch: ShimLaunch) -> Started:
        cdir = self.container_dir(key)
        try:
            # On disk, so an agent restarted later can find the task and its shim again.
            (cdir / TASK_PID_FILE).write_text(str(launch.task_pid))
            (cdir / SHIM_PID_FILE).write_text(str(launch.proc.pid))
            # pidfd of our unreaped child: valid even if the shim has already exited.
            exit_fd = os.pidfd_open(launch.proc.pid)
        except OSError as e:
            self._discard(key)
            raise LaunchError(f"cannot track the started task {key}: {e}") from e
        self._on_started(key, launch.task_pid)
        return Started(launch.proc.pid, launch.started_at, exit_fd)

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
            return ExitStatus(None, 0, time.time(), kills > 0, why)
        code = record.get("exit_code")
        sig = int(record.get("signal") or 0)
        reason = ""
        if kills:
            reason = ("OOMKilled" if sig == signal.SIGKILL
                      else f"the OOM killer killed {kills} process(es) of the task")
        return ExitStatus(code if isinstance(code, int) else None, sig,
                          float(record.get("finished_at") or 0.0), kills > 0, reason)

    def remove(self, key: str) -> None:
        if not is_safe_name(key):
            return
        self._destroy(key)
        self._reap(key)            # its task is gone, so the shim ends right away
        self._remove_state(key)

    def task_pid(self, key: str) -> int | None:
        """The task's pid from the shim's `started` line (kept on disk for re-adoption)."""
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
        # Only our own files: the task's logs may live in the same directory.
        cdir = self.container_dir(key)
        for name in _STATE_FILES:
            (cdir / name).unlink(missing_ok=True)
        try:
            cdir.rmdir()
        except OSError:
            pass
