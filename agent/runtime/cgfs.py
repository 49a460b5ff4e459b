"""Small cgroupfs helpers shared by the v1 and v2 backends: reading counters, killing
every process of a group, removing a group directory."""

from __future__ import annotations

import errno
import os
import re
import signal
import time
from pathlib import Path
from typing import Callable

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
POLL_S = 0.005
# Errors that mean "the group (or its process) is gone", not "something is wrong".
_GONE = (errno.ENOENT, errno.ENODEV, errno.ESRCH)


def is_safe_name(name: str) -> bool:
    """A single path component that cannot escape its directory."""
    return bool(_SAFE_NAME.match(name)) and name not in (".", "..")


def read_text(path: Path | str) -> str | None:
    """The file's text, or None if the group has gone away meanwhile. Plain os calls: the
    agent reads ~10 of these per task per heartbeat, and pathlib's text layer costs more
    than the kernel does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        if e.errno in _GONE:
            return None
        raise
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError as e:
        if e.errno in _GONE:
            return None
        raise
    finally:
        os.close(fd)
    return b"".join(chunks).decode(errors="replace")


def parse_flat_keyed(text: str) -> dict[str, int]:
    """'key value' lines (memory.stat, cpu.stat, memory.events, ...) -> {key: value}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def flat_values(text: str, keys: tuple[str, ...]) -> dict[str, int]:
    """parse_flat_keyed(text) restricted to `keys`, found without splitting every line:
    memory.stat has ~35 lines of which a sample needs 3, and the agent parses it for every
    task on every heartbeat. A key names a whole line's first word (`rss`, not `total_rss`)."""
    out: dict[str, int] = {}
    for key in keys:
        needle, start = key + " ", 0
        while (at := text.find(needle, start)) >= 0:
            if at == 0 or text[at - 1] == "\n":
                end = text.find("\n", at)
                word = text[at + len(needle):end if end >= 0 else len(text)].strip()
                if word.lstrip("-").isdigit():
                    out[key] = int(word)
                break
            start = at + 1
    return out


def parse_pids(text: str) -> list[int]:
    # Only positive pids: os.kill(0, ...) would hit our own process group.
    return [int(w) for w in text.split() if w.isdigit() and int(w) > 0]


def read_pids(procs_file: Path) -> list[int]:
    text = read_text(procs_file)
    return parse_pids(text) if text else []


def signal_pids(pids: list[int], signum: int) -> None:
    me = os.getpid()
    for pid in pids:
        if pid == me:
            continue
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def wait_until(done: Callable[[], bool], timeout: float) -> bool:
    """Poll `done` every few ms until it holds or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def kill_all(procs_file: Path, is_empty: Callable[[], bool],
             freeze: Callable[[bool], None] | None = None, timeout: float = 5.0) -> bool:
    """SIGKILL every process of a group until it is empty. With a freezer, the group is
    frozen first so nothing can fork between reading cgroup.procs and the kills."""
    deadline = time.monotonic() + timeout
    while not is_empty():
        if freeze is not None:
            freeze(True)
        try:
            signal_pids(read_pids(procs_file), signal.SIGKILL)
        finally:
            if freeze is not None:
                freeze(False)
        left = deadline - time.monotonic()
        if wait_until(is_empty, min(0.5, max(0.0, left))):
            return True
        if left <= 0:
            return False
    return True


def rmdir_cgroup(path: Path, timeout: float = 2.0) -> None:
    """Remove a group directory; gone already is fine. EBUSY right after the last process
    died is transient (the kernel is still releasing it), so it is retried briefly."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() >= deadline:
                raise OSError(e.errno, f"cannot remove cgroup {path}: {e.strerror}") from e
            time.sleep(POLL_S)


def make_chain(root: Path, rel: str, mkdir: Callable[[Path], None] = Path.mkdir,
               attempts: int = 3) -> list[Path]:
    """mkdir -p root/rel; returns the directories this call created, top first. Retried
    when a parent vanishes meanwhile: another agent's close() may remove a shared, empty
    parent (e.g. "tcluster") between our mkdirs."""
    for attempt in range(attempts):
        created: list[Path] = []
        path = root
        try:
            for part in rel.split("/"):
                path = path / part
                try:
                    mkdir(path)
                    created.append(path)
                except FileExistsError:
                    pass
            return created
        except FileNotFoundError:
            if attempt == attempts - 1:
                raise
    return []


NAMESPACE = "tcluster"


def closable(root: Path, subtree: str, node_dir: Path, created: list[Path]) -> list[Path]:
    """What close() may remove, deepest first: the node's group, the parents setup made,
    and the project's shared top group ("tcluster"), which any agent may create or drop
    when it is empty. Never a parent someone else made (e.g. a systemd slice)."""
    paths = [node_dir] + [p for p in created[::-1] if p != node_dir]
    top = root / NAMESPACE
    if subtree.split("/")[0] == NAMESPACE and top != node_dir and top not in paths:
        paths.append(top)
    return paths


def remove_if_empty(paths: list[Path]) -> None:
    """rmdir each path (deepest first as given); a group that still has children or
    processes stays, and that is fine: it is someone's."""
    for path in paths:
        try:
            os.rmdir(path)
        except OSError:
            pass
