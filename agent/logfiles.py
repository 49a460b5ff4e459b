"""Each task attempt's directory on the node (logs/<task_id>.<attempt>: launch record,
stdout, stderr and their rotated `.1` files): made root-only, read for `tcl logs`
(tail, and follow across rotations), and removed a retention period after the attempt
ended."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import stat
from pathlib import Path
from typing import AsyncIterator, Callable

log = logging.getLogger(__name__)
CHUNK = 64 * 1024
FINISHED = "finished"             # its mtime: when the attempt ended
FOLLOW_POLL_S = 0.25
FOLLOW_KEEPALIVE_S = 5.0


def task_dir(root: Path, key: str) -> Path:
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = root / key
    path.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def mark_finished(root: Path, key: str) -> None:
    try:
        (root / key / FINISHED).touch(mode=0o600)   # an empty marker, still nobody else's business
    except OSError:
        pass                      # no directory (e.g. a container without a record)


def find_dir(root: Path, task_id: str, attempt: int = 0) -> Path | None:
    """The attempt's directory, or the newest attempt's when `attempt` is 0."""
    if attempt:
        path = root / f"{task_id}.{attempt}"
        return path if path.is_dir() else None
    if not root.is_dir():
        return None
    found = [p for p in root.glob(f"{task_id}.*") if p.name.rpartition(".")[0] == task_id
             and p.name.rpartition(".")[2].isdigit()]
    return max(found, key=lambda p: int(p.name.rpartition(".")[2]), default=None)


async def read(path: Path, tail_bytes: int, max_bytes: int, running: Callable[[], bool],
               owner: int | None = None) -> AsyncIterator[bytes]:
    """The file's last min(tail_bytes or all, max_bytes) bytes; then, while `running()`,
    whatever is appended (an empty chunk every few seconds keeps the stream alive). A
    rotation (the file renamed to .1 and started anew) is followed into the new file.
    `owner`: a user's file (agent/outputs.py), read only if it is a regular file of that uid."""
    handle, inode = _open(path, owner)
    try:
        size = os.fstat(handle.fileno()).st_size if handle else 0
        want = min(size, tail_bytes) if tail_bytes > 0 else size
        if handle:
            handle.seek(size - min(want, max_bytes))
        async for chunk in _drain(handle):
            yield chunk
        idle = 0.0
        while running():
            await asyncio.sleep(FOLLOW_POLL_S)
            idle += FOLLOW_POLL_S
            sent = False
            async for chunk in _follow_once(path, handle, inode, owner):
                if isinstance(chunk, tuple):
                    handle, inode = chunk
                    continue
                sent = True
                yield chunk
            if sent:
                idle = 0.0
            elif idle >= FOLLOW_KEEPALIVE_S:
                idle = 0.0
                yield b""
        async for chunk in _follow_once(path, handle, inode, owner):   # what it wrote just before it ended
            if isinstance(chunk, tuple):
                handle, inode = chunk
            else:
                yield chunk
    finally:
        if handle:
            handle.close()


async def _follow_once(path: Path, handle: object, inode: int,
                       owner: int | None = None) -> AsyncIterator[bytes | tuple[object, int]]:
    """New bytes of the current file; after a rotation, the old file's last bytes, then
    the new file's (a (handle, inode) item tells the caller it switched)."""
    async for chunk in _drain(handle):
        yield chunk
    new, new_inode, moved = _reopen_if_rotated(path, handle, inode, owner)
    if moved:
        async for chunk in _drain(handle):     # written just before the rename
            yield chunk
        if handle is not None:
            handle.close()  # type: ignore[attr-defined]
        yield (new, new_inode)
        async for chunk in _drain(new):
            yield chunk


async def _drain(handle: object) -> AsyncIterator[bytes]:
    if handle is None:
        return
    while chunk := await asyncio.to_thread(handle.read, CHUNK):  # type: ignore[attr-defined]
        yield chunk


def _open(path: Path, owner: int | None = None) -> tuple[object, int]:
    try:
        # A user's file without blocking: a FIFO put in its place must not hang the agent.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (os.O_NONBLOCK if owner is not None else 0))
    except FileNotFoundError:
        return None, 0
    st = os.fstat(fd)
    if owner is not None:
        try:
            check_owned(path, st, owner)
        except PermissionError:
            os.close(fd)
            raise
    return open(fd, "rb"), st.st_ino


def check_owned(path: Path, st: os.stat_result, owner: int) -> None:
    """The agent reads a user's output file as root: only a regular file its task's user
    owns, checked on the open file, so that a link swapped in after the task started never
    shows `tcl logs` somebody else's file."""
    if not stat.S_ISREG(st.st_mode):
        raise PermissionError(f"the output file {path} is not a regular file")
    if st.st_uid != owner:
        raise PermissionError(f"the output file {path} is not owned by the task's user (uid {owner}); "
                              "read it on its node")


def _reopen_if_rotated(path: Path, handle: object, inode: int, owner: int | None = None) -> tuple[object, int, bool]:
    try:
        now = os.stat(path).st_ino
    except FileNotFoundError:
        return handle, inode, False
    if now == inode and handle is not None:
        return handle, inode, False
    new, new_inode = _open(path, owner)
    return new, new_inode, True


def sweep(root: Path, live: set[str], retention_s: float, now: float) -> int:
    """Removes the directories of attempts that ended more than retention_s ago."""
    removed = 0
    if not root.is_dir():
        return 0
    for path in root.iterdir():
        if path.name in live or not path.is_dir():
            continue
        try:
            ended = (path / FINISHED).stat().st_mtime
        except FileNotFoundError:
            continue               # still running, or its end not yet handled
        if now - ended > retention_s:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    if removed:
        log.info("removed %d finished task directories older than %.0fs", removed, retention_s)
    return removed
