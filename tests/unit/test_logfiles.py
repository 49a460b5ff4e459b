"""A task's log as `tcl logs` reads it: tail, follow across a rotation to `.1`, and the
retention sweep of finished attempts' directories."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tcluster.agent import logfiles


def test_tail_reads_the_last_bytes_within_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "stdout"
    path.write_bytes(b"0123456789")

    async def read(tail: int, cap: int) -> bytes:
        return b"".join([c async for c in logfiles.read(path, tail, cap, lambda: False)])
    assert asyncio.run(read(0, 100)) == b"0123456789"
    assert asyncio.run(read(4, 100)) == b"6789"
    assert asyncio.run(read(0, 3)) == b"789"


def test_follow_continues_into_the_new_file_after_a_rotation(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(logfiles, "FOLLOW_POLL_S", 0.01)
    path = tmp_path / "stdout"
    path.write_bytes(b"a\n")
    running = {"on": True}

    async def writer() -> None:
        await asyncio.sleep(0.05)
        with open(path, "ab") as f:
            f.write(b"b\n")
        await asyncio.sleep(0.05)
        with open(path, "ab") as f:
            f.write(b"c\n")                      # written just before the rename
        os.replace(path, tmp_path / "stdout.1")
        path.write_bytes(b"d\n")
        await asyncio.sleep(0.05)
        with open(path, "ab") as f:
            f.write(b"e\n")
        await asyncio.sleep(0.05)
        running["on"] = False

    async def body() -> bytes:
        task = asyncio.create_task(writer())
        got = b"".join([c async for c in logfiles.read(path, 0, 1 << 20, lambda: running["on"])])
        await task
        return got
    assert asyncio.run(body()) == b"a\nb\nc\nd\ne\n"


def test_finished_attempts_are_swept_after_the_retention(tmp_path: Path) -> None:
    old, recent, live = (logfiles.task_dir(tmp_path, k) for k in ("0000000a.0.1", "0000000b.0.1", "0000000c.0.1"))
    for path in (old, recent):
        logfiles.mark_finished(tmp_path, path.name)
    os.utime(old / logfiles.FINISHED, (1000.0, 1000.0))
    assert (old.stat().st_mode & 0o777) == 0o700
    removed = logfiles.sweep(tmp_path, {live.name}, retention_s=3600, now=(recent / logfiles.FINISHED).stat().st_mtime)
    assert removed == 1 and not old.exists() and recent.exists() and live.exists()
    assert logfiles.find_dir(tmp_path, "0000000b.0") == recent
