"""A small filesystem for a master's data dir that a test can make read-only or full.

A 16 MiB tmpfs mounted by the test on a directory it created, and only there; always
unmounted at teardown. Root only: the fixture skips with the reason otherwise.

Kernel fact that shapes the read-only case: `mount -o remount,ro` is refused (EBUSY)
while any process holds a file on that filesystem open for writing, as a running master
holds its SQLite database. So `readonly()` works on a disk no running master writes to
(e.g. between a master stop and its restart), and raises DiskBusy otherwise; the reverse,
`writable()`, always works, also under a running master. `fill()` works at any time.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

SIZE = "16m"
FILLER = ".filler"


class DiskBusy(RuntimeError):
    """remount,ro refused: a process has a file open for writing on this disk."""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30)


def _mounted(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == target for line in mounts)


class SmallDisk:
    """A tmpfs at `path`; `data_dir` is a directory inside it for the master."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data_dir = path / "master"

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        result = _run("mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0755", "tcluster-faults", str(self.path))
        if result.returncode != 0:
            raise RuntimeError(f"mount tmpfs on {self.path}: {result.stderr.strip()}")
        self.data_dir.mkdir()

    def readonly(self) -> None:
        result = _run("mount", "-o", "remount,ro", str(self.path))
        if result.returncode != 0:
            if "busy" in result.stderr:
                raise DiskBusy(f"{self.path}: a file is open for writing, the kernel refuses remount,ro")
            raise RuntimeError(f"remount,ro {self.path}: {result.stderr.strip()}")

    def writable(self) -> None:
        result = _run("mount", "-o", "remount,rw", str(self.path))
        if result.returncode != 0:
            raise RuntimeError(f"remount,rw {self.path}: {result.stderr.strip()}")

    def fill(self) -> int:
        """Writes a file until the disk is full (ENOSPC); returns its size."""
        written = 0
        block = b"\0" * 65536
        with open(self.path / FILLER, "ab", buffering=0) as filler:
            try:
                while True:
                    written += filler.write(block) or 0
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
        return written

    def unfill(self) -> None:
        (self.path / FILLER).unlink(missing_ok=True)

    def free_bytes(self) -> int:
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize

    def unmount(self) -> None:
        if not _mounted(self.path):
            return
        result = _run("umount", str(self.path))
        if result.returncode != 0:   # a process still has it open: detach it, never anything else
            _run("umount", "-l", str(self.path))


def disk_unusable() -> str | None:
    """None when the fixture can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root to mount a tmpfs"
    if _run("sh", "-c", "command -v mount umount").returncode != 0:
        return "mount/umount not installed"
    return None


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    """A 16 MiB tmpfs under tmp_path, unmounted at teardown whatever happened."""
    reason = disk_unusable()
    if reason:
        pytest.skip(reason)
    disk = SmallDisk(tmp_path / "disk")
    disk.mount()
    try:
        yield disk
    finally:
        if _mounted(disk.path):
            disk.writable()
        disk.unmount()
        assert not _mounted(disk.path), f"{disk.path} is still mounted"
