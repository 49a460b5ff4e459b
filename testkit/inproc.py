"""`tcl` run inside the test's own process, for tests whose subject is the master, the agent
or the cgroups rather than the CLI binary (system and fault tests): the same code and the
same output as the binary, without a Python start per call. Under the tests/vm guest's
software emulation a `tcl` process takes 8-16 s to start, and these tests poll `tcl status`.
tests/e2e keeps running the binary itself.

Only the calling thread's output is taken (another thread of the test, a watcher printing,
keeps writing where it did); the job's submit directory is "/" as for the binary run in "/"
(testkit.procs.TCL_CWD)."""

from __future__ import annotations

import io
import subprocess
import sys
import threading
from contextlib import contextmanager
from typing import Iterator, TextIO
from unittest import mock

SUBMIT_DIR = "/"          # testkit.procs.TCL_CWD: a directory every task user may enter
_lock = threading.Lock()   # one in-process call at a time: sys.stdout is the process's


class _ThisThread(io.TextIOBase):
    """sys.stdout/sys.stderr while a call runs: its thread's writes to a buffer, others' on."""

    def __init__(self, other: TextIO) -> None:
        self.other, self.buffer_text = other, io.StringIO()
        self.thread = threading.get_ident()

    def write(self, text: str) -> int:
        if threading.get_ident() == self.thread:
            return self.buffer_text.write(text)
        return self.other.write(text)

    def flush(self) -> None:
        if threading.get_ident() != self.thread:
            self.other.flush()

    def isatty(self) -> bool:
        return False

    @property
    def buffer(self) -> _Bytes:          # `tcl logs` writes the task's bytes as they are
        return _Bytes(self)


class _Bytes:
    def __init__(self, text: _ThisThread) -> None:
        self.text = text

    def write(self, data: bytes) -> int:
        if threading.get_ident() == self.text.thread:
            self.text.buffer_text.write(data.decode("utf-8", "replace"))
        else:
            self.text.other.buffer.write(data)
        return len(data)

    def flush(self) -> None:
        self.text.flush()


@contextmanager
def _captured() -> Iterator[tuple[_ThisThread, _ThisThread]]:
    out, err = _ThisThread(sys.stdout), _ThisThread(sys.stderr)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err          # type: ignore[assignment]
    try:
        yield out, err
    finally:
        sys.stdout, sys.stderr = saved


def tcl_in_process(master: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`tcl --master MASTER ARGS...` as a CompletedProcess, as subprocess.run would give it."""
    from tcluster.cli import main as cli, spec
    argv = ["--master", master, *args]
    with _lock, _captured() as (out, err), mock.patch.object(spec, "submit_directory", lambda environ: SUBMIT_DIR):
        try:
            code = cli.main(argv)
        except SystemExit as exc:            # a handler's own exit, as the binary's would be
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(["tcl", *argv], code, out.buffer_text.getvalue(), err.buffer_text.getvalue())
