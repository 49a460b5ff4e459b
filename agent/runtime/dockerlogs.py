"""A docker task's stdout and stderr, copied into the task's own log files.

The engine keeps the container's output (json-file driver, capped like the task's own
files when the task sets a cap); a thread per stream follows it into spec.stdout_path and
spec.stderr_path while the task runs, so `tcl logs` reads docker tasks exactly like native
ones. After an agent restart the copy starts over from the engine's record (the files are
rewritten from its beginning): no offsets to keep, nothing lost or doubled."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable, Iterator

log = logging.getLogger(__name__)
JOIN_TIMEOUT_S = 10.0


class RotatingFile:
    """Appends; past `cap` bytes the file becomes <file>.1 and a new one starts (the
    native shim's rule for log_max_bytes)."""

    def __init__(self, path: str, cap: int) -> None:
        self.path, self.cap = Path(path), cap
        for stale in (self.path, self.path.with_name(self.path.name + ".1")):
            stale.unlink(missing_ok=True)        # rewritten from the engine's record
        self._f = open(self.path, "wb")
        self._size = 0

    def write(self, data: bytes) -> None:
        if self.cap and self._size + len(data) > self.cap and self._size:
            self._f.close()
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            self._f = open(self.path, "wb")
            self._size = 0
        self._f.write(data)
        self._f.flush()         # readable by `tcl logs` right away
        self._size += len(data)

    def close(self) -> None:
        self._f.close()


class LogCopier:
    """Two threads (stdout, stderr) following a container's output into files. `open_stream`
    returns the engine's byte stream for one of them; it ends when the container stops."""

    def __init__(self, open_stream: Callable[[bool], Iterator[bytes]], stdout_path: str, stderr_path: str,
                 cap: int = 0) -> None:
        self._threads = [threading.Thread(target=self._copy, args=(open_stream, is_err, path, cap),
                                          name=f"docker-logs:{Path(path).name}", daemon=True)
                         for is_err, path in ((False, stdout_path), (True, stderr_path)) if path]
        self.error: str = ""
        self.stopping = False        # the container is being removed: a cut stream is expected

    def start(self) -> LogCopier:
        for t in self._threads:
            t.start()
        return self

    def _copy(self, open_stream: Callable[[bool], Iterator[bytes]], is_err: bool, path: str, cap: int) -> None:
        try:
            out = RotatingFile(path, cap)
        except OSError as e:
            self.error = f"cannot write the task's log {path}: {e}"
            log.warning("%s", self.error)
            return
        try:
            for chunk in open_stream(is_err):
                out.write(chunk)
        except Exception as e:       # engine gone, socket closed: the copy so far stays
            self.error = f"copying the task's {'stderr' if is_err else 'stdout'} stopped: {e}"
            log.log(logging.DEBUG if self.stopping else logging.WARNING, "%s", self.error)
        finally:
            out.close()

    def join(self, timeout: float = JOIN_TIMEOUT_S) -> bool:
        """Wait until both streams are copied to their end (the container has stopped)."""
        for t in self._threads:
            t.join(timeout)
        return not any(t.is_alive() for t in self._threads)
