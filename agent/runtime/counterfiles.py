"""The counter files a backend samples on every heartbeat, kept open between samples.

A cgroup file regenerates its text when it is read from offset 0, so `pread(fd, n, 0)` on
a descriptor kept open reads fresh counters. Opening is what costs: the path walk in
kernfs took ~3/4 of a read_text on this host (22.5 us against 5.8 us for the pread), and
with 100 tasks the agent opened ~1,000 files a second (bench/agent_overhead.py).

A container's descriptors are closed when it is forgotten (its group is destroyed, or a
sample finds it gone): an open file pins a removed group's memory in the kernel. The
number kept open is bounded by the process's file limit (raised to its hard limit at
start, as systemd recommends for programs that do not use select()); past the bound a
read opens and closes as before."""

from __future__ import annotations

import errno
import os
import resource
import threading

from .cgfs import read_text

_GONE = (errno.ENOENT, errno.ENODEV, errno.ESRCH)
RESERVED_FDS = 256       # left to sockets, logs, pipes and the shims' setup
CHUNK = 65536


def raise_file_limit() -> int:
    """Raises the soft RLIMIT_NOFILE to the hard one; returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError):
            pass
    return soft


def pread_all(fd: int) -> bytes:
    data = os.pread(fd, CHUNK, 0)
    if len(data) < CHUNK:
        return data
    chunks = [data]
    while chunk := os.pread(fd, CHUNK, CHUNK * len(chunks)):
        chunks.append(chunk)
    return b"".join(chunks)


class CounterFiles:
    """{container key: {path: open descriptor}}, read under one lock: the heartbeat's sample
    and a task's final sample run in different worker threads, and a descriptor closed by
    one must never be read (or reused) by the other."""

    def __init__(self, most_open: int | None = None) -> None:
        limit = raise_file_limit() if most_open is None else most_open + RESERVED_FDS
        self._most_open = max(0, limit - RESERVED_FDS)
        self._fds: dict[str, dict[str, int]] = {}
        self._open = 0
        self._lock = threading.Lock()

    def read(self, key: str, paths: list[tuple[str, str]]) -> dict[str, str]:
        """{name: text} of the files that exist (a group gone meanwhile reads as absent)."""
        with self._lock:
            fds = self._fds.setdefault(key, {})
            out = {}
            for name, path in paths:
                text = self._read(fds, path)
                if text is not None:
                    out[name] = text
            return out

    def _read(self, fds: dict[str, int], path: str) -> str | None:
        if path in fds:
            try:
                return pread_all(fds[path]).decode(errors="replace")
            except OSError as e:
                os.close(fds.pop(path))
                self._open -= 1
                if e.errno not in _GONE:
                    raise
            # Removed since it was opened: a group of the same name may exist again.
        return self._open_and_read(fds, path)

    def _open_and_read(self, fds: dict[str, int], path: str) -> str | None:
        if self._open >= self._most_open:
            return read_text(path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            if e.errno in _GONE:
                return None
            if e.errno in (errno.EMFILE, errno.ENFILE):
                return read_text(path)
            raise
        try:
            data = pread_all(fd)
        except OSError as e:
            os.close(fd)
            if e.errno in _GONE:
                return None
            raise
        fds[path] = fd
        self._open += 1
        return data.decode(errors="replace")

    def forget(self, key: str) -> None:
        with self._lock:
            for fd in self._fds.pop(key, {}).values():
                os.close(fd)
                self._open -= 1

    def open_count(self) -> int:
        return self._open

    def close(self) -> None:
        for key in list(self._fds):
            self.forget(key)
