"""The task supervisor binary: agent/shim.c compiled once per machine and cached.

Why C: a Python shim costs ~35 ms of interpreter start-up per task and ~9 MiB per running
task, and the container's init (PID 1 of its namespace) would be charged to the task's
memory limit; the C shim starts in ~1-2 ms and weighs ~100 KiB, like conmon or
containerd's shims. It is built at agent start (or `python -m tcluster.agent.shimbuild`
at install time) into a cache named by the source's hash, so a changed shim.c is rebuilt
and an unchanged one never is. A wheel (setup.py) ships one built statically at wheel-build
time beside shim.c, under the same hashed name, so a node needs no compiler: it is used when
present, and a shim.c it was not built from is never paired with it. $TCL_SHIM points at a
prebuilt binary instead (e.g. a machine without a compiler)."""

from __future__ import annotations

import hashlib
import os
import sys
import shutil
import subprocess
import tempfile
from pathlib import Path

from .base import RuntimeSetupError

SOURCE = Path(__file__).resolve().parent.parent / "shim.c"
_FIX = ("install a C compiler once (`apt-get install gcc libc6-dev`), or set TCL_SHIM to a "
        "tcl-shim built elsewhere from agent/shim.c")


def cache_dir() -> Path:
    explicit = os.environ.get("TCL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    system = Path("/var/cache/tcluster")
    if os.geteuid() == 0:
        return system
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tcluster"


def binary_name(source: bytes) -> str:
    return f"tcl-shim-{hashlib.sha256(source).hexdigest()[:16]}"


def _compile(source: Path, out: Path) -> None:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeSetupError(f"no C compiler to build the task supervisor ({source}); {_FIX}")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".build-")
    os.close(fd)
    try:
        # Static, so the same binary also runs in a guest with another libc (tests/vm).
        # -pthread: the log writer thread (log_max).
        for extra in (["-static"], []):
            try:
                done = subprocess.run([compiler, "-O2", "-Wall", "-pthread", *extra, "-o", tmp, str(source)],
                                      capture_output=True, text=True)
            except OSError as e:
                raise RuntimeSetupError(f"cannot run the C compiler {compiler!r}: {e.strerror}; {_FIX}") from None
            if done.returncode == 0:
                break
        else:
            raise RuntimeSetupError(f"cannot build the task supervisor: {done.stderr.strip()[-800:]}; {_FIX}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)      # atomic: concurrent agents never run a half-written binary
    finally:
        Path(tmp).unlink(missing_ok=True)


def shim_binary() -> Path:
    """The path of a built shim, building it on first use."""
    explicit = os.environ.get("TCL_SHIM")
    if explicit:
        path = Path(explicit)
        if not os.access(path, os.X_OK):
            raise RuntimeSetupError(f"TCL_SHIM={explicit} is not an executable file")
        return path
    try:
        source = SOURCE.read_bytes()
    except OSError as e:
        raise RuntimeSetupError(f"cannot read the task supervisor's source {SOURCE}: {e}") from e
    shipped = shipped_binary(source)
    if shipped is not None:
        return shipped
    out = cache_dir() / binary_name(source)
    if not os.access(out, os.X_OK):
        _compile(SOURCE, out)
    return out


def shipped_binary(source: bytes) -> Path | None:
    """The shim the wheel carries (built from this very source), if it is there and runnable."""
    path = SOURCE.parent / binary_name(source)
    return path if os.access(path, os.X_OK) else None


def main() -> int:
    """`python -m tcluster.agent.shimbuild`: build (or find) the shim and print its path."""
    try:
        print(shim_binary())
    except RuntimeSetupError as e:
        print(f"tcluster: {e}", file=sys.stderr)
        return 1
    return 0
