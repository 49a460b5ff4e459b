"""The disk fixture itself: read-only, full, back, and always unmounted."""

from __future__ import annotations

import errno
import sqlite3

import pytest

from tests.faults.disk import DiskBusy, SmallDisk, _mounted


def test_readonly_full_and_back(small_disk: SmallDisk) -> None:
    probe = small_disk.data_dir / "probe"
    probe.write_bytes(b"x")
    small_disk.readonly()
    with pytest.raises(OSError) as info:
        probe.write_bytes(b"y")
    assert info.value.errno == errno.EROFS
    assert probe.read_bytes() == b"x"        # reads keep working
    small_disk.writable()
    assert small_disk.fill() > 0 and small_disk.free_bytes() == 0
    with pytest.raises(OSError) as info:
        (small_disk.data_dir / "more").write_bytes(b"z" * 65536)
    assert info.value.errno == errno.ENOSPC
    small_disk.unfill()
    (small_disk.data_dir / "more").write_bytes(b"z" * 65536)


def test_readonly_is_refused_under_an_open_writer(small_disk: SmallDisk) -> None:
    """Why the read-only scenario restarts the master: the kernel will not remount a disk
    read-only while a SQLite connection holds it open for writing."""
    db = sqlite3.connect(small_disk.data_dir / "x.db")
    db.execute("CREATE TABLE t (x)")
    try:
        with pytest.raises(DiskBusy):
            small_disk.readonly()
    finally:
        db.close()


def test_unmounted_at_teardown(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.faults.disk import disk_unusable
    if disk_unusable():
        pytest.skip(str(disk_unusable()))
    disk = SmallDisk(tmp_path / "d")
    disk.mount()
    assert _mounted(disk.path)
    disk.unmount()
    assert not _mounted(disk.path)
