"""Boot the cached Debian guest under qemu (software emulation, HOST.md) and run one shell
script in it: the guest's runner unit runs /mnt/share/run.sh after multi-user.target,
writes out.log and rc into the share and powers off. The repo is shared read-only at
/mnt/repo, so the guest runs the very code under test."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.vm.images import Images

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class GuestRun:
    rc: int | None          # None: the guest never got to write one
    out: str                # run.sh's stdout and stderr
    console: str            # the serial console, for diagnosing a failed boot
    seconds: float


def qemu_missing() -> str | None:
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 is not installed (.ci/run installs qemu-system-x86)"
    return None


def boot(images: Images, share: Path, script: str, timeout_s: float = 1200, memory_mb: int = 2048,
         cpus: int = 2, allow_reboot: bool = False) -> GuestRun:
    """allow_reboot: a reboot in the guest resets it on the same (snapshot) disk and run.sh
    runs again in the new boot; otherwise a reboot ends the run like a poweroff."""
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
    started = time.monotonic()
    # Own session, killed by pid on timeout: nothing else on the host is touched.
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        console, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        console, _ = proc.communicate()
        console += b"\n[host] qemu killed after the timeout\n"
    rc_file, out_file = share / "rc", share / "out.log"
    rc = int(rc_file.read_text().strip()) if rc_file.exists() and rc_file.read_text().strip() else None
    out = out_file.read_text(errors="replace") if out_file.exists() else ""
    return GuestRun(rc, out, console.decode(errors="replace"), time.monotonic() - started)


if __name__ == "__main__":
    import sys

    from tests.vm.images import build_all
    share = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tcl-vm-share")
    script = sys.stdin.read() if not os.isatty(0) else "uname -a; cat /proc/self/cgroup\n"
    result = boot(build_all(), share, script)
    print(result.out)
    print(f"rc={result.rc} in {result.seconds:.1f}s")
    if result.rc is None:
        print(result.console[-3000:])
