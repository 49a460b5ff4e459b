"""Boot the cached Debian guest under qemu (software emulation, HOST.md) and run one shell
script in it: the guest's runner unit runs /mnt/share/run.sh after multi-user.target,
writes out.log and rc into the share and powers off. The repo is shared read-only at
/mnt/repo, so the guest runs the very code under test."""

from __future__ import annotations

import os
import py_compile
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tests.vm.images import Images

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class GuestRun:
    rc: int | None          # None: the guest never got to write one
    out: str                # run.sh's stdout and stderr
    console: str            # the serial console, for diagnosing a failed boot
    seconds: float


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
         started: Callable[[subprocess.Popen[bytes]], None] | None = None) -> GuestRun:
    """allow_reboot: a reboot in the guest resets it on the same (snapshot) disk and run.sh
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
    try:
        console, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        console, _ = proc.communicate()
        console += b"\n[host] qemu killed after the timeout\n"
    rc_file, out_file = share / "rc", share / "out.log"
    rc = int(rc_file.read_text().strip()) if rc_file.exists() and rc_file.read_text().strip() else None
    out = out_file.read_text(errors="replace") if out_file.exists() else ""
    return GuestRun(rc, out, console.decode(errors="replace"), time.monotonic() - began)


if __name__ == "__main__":
    from tests.vm.images import build_all
    share = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tcl-vm-share")
    script = sys.stdin.read() if not os.isatty(0) else "uname -a; cat /proc/self/cgroup\n"
    result = boot(build_all(), share, script)
    print(result.out)
    print(f"rc={result.rc} in {result.seconds:.1f}s")
    if result.rc is None:
        print(result.console[-3000:])
