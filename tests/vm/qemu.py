"""Boot the cached Debian guest under qemu (software emulation, HOST.md) and run one shell
script in it: the guest's runner unit runs /mnt/share/run.sh after multi-user.target,
writes out.log and rc into the share and powers off. The repo is shared read-only at
/mnt/repo, so the guest runs the very code under test."""

from __future__ import annotations

import os
import py_compile
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable

from tests.vm.images import Images

REPO = Path(__file__).resolve().parents[2]
# The guest kernel's soft-lockup report: a CPU looping in the kernel, its watchdog thread
# not scheduled for that many seconds. Under software emulation a guest has locked up this
# way for good (CI: both CPUs, in systemd and ext4lazyinit, for an hour); a short report
# can be a starved host, but nothing legitimate holds a CPU in the kernel for minutes.
SOFT_LOCKUP = re.compile(rb"soft lockup - CPU#\d+ stuck for (\d+)s")
LOCKUP_KILL_S = 300
# The same for an RCU stall ("rcu: ... (detected by 1, t=75002 jiffies, ...)"), counted in
# jiffies of the guest's kernel: Debian's amd64 kernels tick at 250 Hz (CONFIG_HZ_250).
RCU_STALL = re.compile(rb"rcu: .*\bt=(\d+) jiffies")
GUEST_HZ = 250
# A guest whose kernel locked up (qemu.SOFT_LOCKUP) within this many seconds is booted once
# more, with what is left of the first boot's timeout (at least RETRY_MIN_TIMEOUT_S): later than
# this, a second whole run would not end within CI's limit, and the failure is reported.
RETRY_WITHIN_S = 1500
RETRY_MIN_TIMEOUT_S = 2300
# What the host puts in the share before the boot and keeps for a second one; everything
# else there (results, markers, logs) is the guest's and is cleared before booting again.
HOST_SHARE_FILES = ("pkg", "tcl-shim", "run.sh")


@dataclass(frozen=True)
class GuestRun:
    rc: int | None          # None: the guest never got to write one
    out: str                # run.sh's stdout and stderr
    console: str            # the serial console, for diagnosing a failed boot
    seconds: float
    locked_up: bool = False  # killed because its kernel reported a CPU stuck LOCKUP_KILL_S or more


class ConsoleWatch:
    """qemu's serial console, read line by line in a thread of its own (the pipe never
    fills), noting a guest kernel that reports a CPU stuck (a soft lockup or an RCU stall)
    for lockup_kill_s or more."""

    def __init__(self, stream: IO[bytes], lockup_kill_s: float) -> None:
        self.lines: list[bytes] = []
        self.locked_up = threading.Event()
        self._stream, self._lockup_kill_s = stream, lockup_kill_s
        self._thread = threading.Thread(target=self._read, name="qemu-console", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in iter(self._stream.readline, b""):
            self.lines.append(line)
            if self.stuck_s(line) >= self._lockup_kill_s:
                self.locked_up.set()

    @staticmethod
    def stuck_s(line: bytes) -> float:
        """How long the guest kernel says a CPU has been stuck, by this console line (0: not said)."""
        if (lockup := SOFT_LOCKUP.search(line)) is not None:
            return float(lockup.group(1))
        if (stall := RCU_STALL.search(line)) is not None:
            return int(stall.group(1)) / GUEST_HZ
        return 0.0

    def text(self) -> bytes:
        self._thread.join(timeout=10)
        return b"".join(self.lines)


def watch(proc: subprocess.Popen[bytes], timeout_s: float, lockup_kill_s: float = LOCKUP_KILL_S) -> tuple[str, bool]:
    """Waits for qemu to end; kills it (by pid) after timeout_s, or as soon as its guest
    reports a CPU locked up. Returns the console, with a [host] line saying why qemu was
    killed if it was, and whether the lockup was the reason."""
    assert proc.stdout is not None
    console = ConsoleWatch(proc.stdout, lockup_kill_s)
    deadline = time.monotonic() + timeout_s
    why = ""
    while proc.poll() is None:
        locked = console.locked_up.wait(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
        if locked or time.monotonic() >= deadline:
            if proc.poll() is None:
                proc.kill()
                why = f"its kernel reported a CPU stuck for {lockup_kill_s:.0f} s or more" if locked else "the timeout"
            break
    proc.wait()
    text = console.text() + (f"\n[host] qemu killed after {why}\n".encode() if why else b"")
    return text.decode(errors="replace"), why.startswith("its kernel")


def clear_guest_files(share: Path) -> None:
    """Removes what a guest wrote into the share (results, its started and reboot markers,
    logs), keeping what the host put there (HOST_SHARE_FILES)."""
    for entry in share.iterdir():
        if entry.name in HOST_SHARE_FILES:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def boot_with_a_retry(boot_once: Callable[[float], GuestRun], share: Path,
                      timeout_s: float) -> tuple[GuestRun, list[str]]:
    """boot_once(timeout_s) runs the guest. A guest that locked up early is booted once more,
    on a clean share, and the [vm] lines returned say so with the first console's tail."""
    first = boot_once(timeout_s)
    if not first.locked_up or first.seconds > RETRY_WITHIN_S:
        return first, []
    tail = [line for line in first.console.splitlines() if line.strip()][-4:]
    note = (f"[vm] the guest's kernel locked up after {first.seconds:.0f} s of its run and was booted once more; "
            f"the first console ended:\n" + "\n".join(tail))
    clear_guest_files(share)
    second = boot_once(max(RETRY_MIN_TIMEOUT_S, timeout_s - first.seconds))
    return GuestRun(second.rc, second.out, second.console, first.seconds + second.seconds, second.locked_up), [note]


def compile_for_the_guest(repo: Path = REPO) -> int:
    """Writes the bytecode of the code the guest imports (the package's folders, tests/,
    bench/) into __pycache__ beside each source, as an import would; returns how many files
    were compiled. The guest sees the repo read-only, so without these every Python process
    there (each `tcl`, master and agent) compiles the package anew under software emulation.
    Written where the guest's interpreter (the same 3.11) looks, whatever this process's
    PYTHONPYCACHEPREFIX or PYTHONDONTWRITEBYTECODE say. Python checks each file's recorded
    source mtime and size on import, so a stale one is never used; it is rewritten here."""
    with open(repo / "pyproject.toml", "rb") as f:
        folders = set(tomllib.load(f)["tool"]["setuptools"]["package-dir"].values())
    compiled = 0
    for folder in sorted(folders | {"tests", "bench"}):
        for source in (repo / folder).rglob("*.py"):
            cached = source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc"
            if cached.exists() and cached.stat().st_mtime >= source.stat().st_mtime:
                continue
            try:
                py_compile.compile(str(source), cfile=str(cached), doraise=True)
                compiled += 1
            except py_compile.PyCompileError:
                pass            # the guest reports a syntax error in its own run, where it matters
    return compiled


def qemu_missing() -> str | None:
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 is not installed (.ci/run installs qemu-system-x86)"
    return None


def boot(images: Images, share: Path, script: str, timeout_s: float = 1200, memory_mb: int = 2048,
         cpus: int = 2, allow_reboot: bool = False,
         started: Callable[[subprocess.Popen[bytes]], None] | None = None,
         lockup_kill_s: float = LOCKUP_KILL_S) -> GuestRun:
    """A guest whose kernel reports a CPU locked up (see SOFT_LOCKUP) is killed at once
    rather than left to the timeout: GuestRun.locked_up says so, and the caller may boot again.
    allow_reboot: a reboot in the guest resets it on the same (snapshot) disk and run.sh
    runs again in the new boot; otherwise a reboot ends the run like a poweroff.
    started: told the qemu process, so a session that ends early can stop it by pid."""
    share.mkdir(parents=True, exist_ok=True)
    (share / "run.sh").write_text(script)
    for name in ("rc", "out.log"):
        (share / name).unlink(missing_ok=True)
    args = [
        "qemu-system-x86_64", "-accel", "tcg", "-cpu", "max", "-m", str(memory_mb), "-smp", str(cpus), "-nographic",
        *([] if allow_reboot else ["-no-reboot"]), "-net", "none", "-kernel", str(images.kernel), "-initrd", str(images.initrd),
        "-append", "console=ttyS0 vmroot=ext4 panic=-1 quiet systemd.show_status=false",
        "-drive", f"file={images.rootfs},format=raw,if=virtio,snapshot=on",
        "-virtfs", f"local,path={share},mount_tag=share,security_model=none,id=share",
        "-virtfs", f"local,path={REPO},mount_tag=repo,security_model=none,id=repo,readonly=on",
    ]
    began = time.monotonic()
    # Own session, killed by pid on timeout: nothing else on the host is touched.
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    if started is not None:
        started(proc)
    console, locked_up = watch(proc, timeout_s, lockup_kill_s)
    rc_file, out_file = share / "rc", share / "out.log"
    rc = int(rc_file.read_text().strip()) if rc_file.exists() and rc_file.read_text().strip() else None
    out = out_file.read_text(errors="replace") if out_file.exists() else ""
    return GuestRun(rc, out, console, time.monotonic() - began, locked_up)


if __name__ == "__main__":
    from tests.vm.images import build_all
    share = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tcl-vm-share")
    script = sys.stdin.read() if not os.isatty(0) else "uname -a; cat /proc/self/cgroup\n"
    result = boot(build_all(), share, script)
    print(result.out)
    print(f"rc={result.rc} in {result.seconds:.1f}s")
    if result.rc is None:
        print(result.console[-3000:])
