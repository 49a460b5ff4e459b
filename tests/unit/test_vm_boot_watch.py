"""The VM boot's watch on the guest's console (tests/vm/qemu.py): a guest whose kernel
reports a CPU locked up for minutes is killed at once instead of being left to the
hour-long timeout (a CI run lost an hour so), and booted once more when that happened
early. A stand-in process plays qemu: it prints console lines, then sleeps."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.vm.qemu import GuestRun, boot_with_a_retry, clear_guest_files, watch

LOCKUP_LINE = "[ 3312.713225] watchdog: BUG: soft lockup - CPU#1 stuck for {s}s! [ext4lazyinit:113]"
RCU_LINE = "[  400.718017] rcu: \t(detected by 1, t={j} jiffies, g=8857, q=85 ncpus=2)"


def fake_qemu(lines: list[str], then_sleep_s: float) -> subprocess.Popen[bytes]:
    script = f"import sys, time\nfor l in {lines!r}: print(l, flush=True)\ntime.sleep({then_sleep_s})\n"
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


def test_a_guest_locked_up_for_minutes_is_killed_at_once() -> None:
    proc = fake_qemu(["booting", LOCKUP_LINE.format(s=301)], then_sleep_s=120)
    started = time.monotonic()
    console, locked_up = watch(proc, timeout_s=100, lockup_kill_s=300)
    assert locked_up and proc.returncode is not None and proc.returncode < 0     # killed, not ended
    assert time.monotonic() - started < 60                                       # long before the timeout
    assert "stuck for 301s" in console and "[host] qemu killed after its kernel reported a CPU stuck" in console


def test_a_long_rcu_stall_is_a_lockup_too() -> None:
    proc = fake_qemu(["booting", RCU_LINE.format(j=5252), RCU_LINE.format(j=80000)], then_sleep_s=120)
    console, locked_up = watch(proc, timeout_s=100, lockup_kill_s=300)     # 80,000 jiffies at 250 Hz: 320 s
    assert locked_up and proc.returncode is not None and proc.returncode < 0
    assert "t=5252 jiffies" in console


def test_a_short_lockup_report_is_let_be() -> None:
    # Seconds-long reports happen on a starved host and pass: the guest goes on to the end.
    lines = ["booting", LOCKUP_LINE.format(s=22), RCU_LINE.format(j=5252), "done"]
    proc = fake_qemu(lines, then_sleep_s=0.5)
    console, locked_up = watch(proc, timeout_s=100, lockup_kill_s=300)
    assert not locked_up and proc.returncode == 0
    assert console.splitlines() == lines


def test_a_silent_guest_still_meets_the_timeout() -> None:
    proc = fake_qemu(["booting"], then_sleep_s=120)
    console, locked_up = watch(proc, timeout_s=1.5, lockup_kill_s=300)
    assert not locked_up and proc.returncode is not None and proc.returncode < 0
    assert console.endswith("[host] qemu killed after the timeout\n")


def run_of(seconds: float, locked_up: bool, rc: int | None = None) -> GuestRun:
    return GuestRun(rc, "", "booting\n" + LOCKUP_LINE.format(s=400) if locked_up else "ok", seconds, locked_up)


def test_an_early_lockup_boots_once_more_on_a_clean_share(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ready").write_text("{}")
    for name in ("tcl-shim", "run.sh", "guest-started", "secure-reboot-pending", "out.log"):
        (tmp_path / name).write_text("x")
    (tmp_path / "logs").mkdir()
    timeouts: list[float] = []
    runs = [run_of(600, locked_up=True), run_of(1300, locked_up=False, rc=0)]

    def boot_once(timeout_s: float) -> GuestRun:
        timeouts.append(timeout_s)
        if len(timeouts) == 2:      # the second boot finds only what the host put there
            assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg", "run.sh", "tcl-shim"]
            assert (tmp_path / "pkg" / "ready").exists()
        return runs[len(timeouts) - 1]

    run, lines = boot_with_a_retry(boot_once, tmp_path, timeout_s=3800)
    assert timeouts == [3800, 3200]
    assert run.rc == 0 and run.seconds == 1900 and not run.locked_up
    assert "locked up after 600 s" in lines[0] and "stuck for 400s" in lines[0]


def test_a_late_lockup_or_a_clean_end_is_not_booted_again(tmp_path: Path) -> None:
    for first in (run_of(2000, locked_up=True), run_of(1400, locked_up=False, rc=1)):
        boots: list[float] = []
        run, lines = boot_with_a_retry(lambda t: boots.append(t) or first, tmp_path, timeout_s=3800)
        assert boots == [3800] and run is first and lines == []


def test_clear_guest_files_keeps_the_hosts_files(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "tcl-shim").write_text("x")
    (tmp_path / "results.json").write_text("{}")
    clear_guest_files(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg", "tcl-shim"]
