"""The process backend: tasks run through the same shim, but in no cgroup at all. No cpu,
memory or pids limit is enforced; usage is read with psutil from the task's session.
For development and laptops only."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

import psutil

from .base import RawUsage, TaskSpec
from .cgfs import is_safe_name, wait_until
from .shimbase import EXIT_FILE, SPEC_FILE, ShimRuntime

log = logging.getLogger(__name__)
KILL_TIMEOUT_S = 5.0


def session_members(sid: int) -> list[psutil.Process]:
    """Live processes of session `sid`. The task leads its own session (the shim calls
    setsid), so this finds its children even after they were re-parented."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return members


def _usage(members: list[psutil.Process], at: float) -> RawUsage:
    user = system = rss = shared = threads = 0.0
    for proc in members:
        try:
            with proc.oneshot():
                t = proc.cpu_times()
                m = proc.memory_info()
                threads += proc.num_threads()
        except psutil.Error:
            continue
        # children_*: CPU of descendants already reaped, so the counter keeps growing.
        user += t.user + t.children_user
        system += t.system + t.children_system
        rss += m.rss
        shared += getattr(m, "shared", 0)
    return RawUsage(at=at, cpu_ns=int((user + system) * 1e9), user_ns=int(user * 1e9),
                    system_ns=int(system * 1e9),
                    memory_bytes=int(rss), anon_bytes=int(rss - shared), file_bytes=int(shared),
                    pids=int(threads))


class ProcessRuntime(ShimRuntime):
    name = "process"

    def __init__(self, state_dir: Path) -> None:
        # No namespaces either: the task's session is how this backend finds its processes.
        super().__init__(state_dir, namespaces=False)

    def setup(self) -> None:
        log.warning("!!! runtime 'process': tasks run WITHOUT isolation: no cpu, memory or pids "
                    "limit is enforced and a task can escape cleanup by calling setsid. "
                    "Use it for development only; production nodes need cgroup2 or cgroup1. !!!")
        self.setup_shim()

    def _prepare(self, spec: TaskSpec) -> list[str]:
        return []           # no cgroup: the shim skips entering one

    def _kill_all(self, key: str) -> None:
        self._destroy(key)

    def _destroy(self, key: str) -> None:
        pid = self.task_pid(key)
        if pid is None:
            return

        def gone() -> bool:
            self._kill(pid, signal.SIGKILL)
            return not session_members(pid)
        if not wait_until(gone, KILL_TIMEOUT_S):
            log.warning("processes of %s survived %.0f s of SIGKILL", key, KILL_TIMEOUT_S)

    @staticmethod
    def _kill(sid: int, signum: int) -> None:
        # The session's own process group first, then members that moved to another group.
        try:
            os.killpg(sid, signum)
        except (ProcessLookupError, PermissionError):
            pass
        for proc in session_members(sid):
            try:
                if os.getpgid(proc.pid) != sid:    # killpg reached the others already
                    proc.send_signal(signum)
            except (ProcessLookupError, psutil.Error):
                pass

    def sample(self, key: str) -> RawUsage | None:
        pid = self.task_pid(key) if is_safe_name(key) else None
        if pid is None:
            return None
        members = session_members(pid)
        return _usage(members, time.time()) if members else None

    def _signal_each(self, key: str, signum: int) -> None:
        pid = self.task_pid(key)
        if pid is not None:
            self._kill(pid, signum)

    def containers(self) -> list[str]:
        root = self._state_dir / "containers"
        if not root.is_dir():
            return []
        return sorted(p.name for p in root.iterdir() if (p / SPEC_FILE).exists() or (p / EXIT_FILE).exists())

    def close(self) -> None:
        pass
