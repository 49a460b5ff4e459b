"""Runs inside the guest (cgroup v2, systemd as PID 1), from tests/vm/test_vm.py: the
system tests against cgroup v2, then the Debian package's checks (guest_package.py: its
units verified and started for real), then the secure join across a reboot
(guest_secure.py). Each phase's seconds go into results.json ("timings").
Writes results.json into the share; each step's output goes to its own log there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, TypeVar

import entrypoints
import guest_package  # beside this file (the script's directory is on sys.path)
import guest_secure
from selection import GUEST_TESTS

SHARE = Path("/mnt/share")
REPO = Path("/mnt/repo")
BIN = Path(sys.executable).parent
UNITS = ("tcl-master.service", "tcl-agent.service")
T = TypeVar("T")


def run(args: list[str], log: str, timeout: float = 900, env: dict[str, str] | None = None) -> tuple[int, str]:
    started = time.monotonic()
    # Streamed into the share as it runs: a slow or stuck step can be watched from the host.
    with open(SHARE / log, "w") as sink:
        try:
            rc = subprocess.run(args, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout, env=env).returncode
        except subprocess.TimeoutExpired:
            sink.write(f"\n[timeout after {timeout}s]\n")
            rc = 124
    out = (SHARE / log).read_text()
    print(f"[guest] {' '.join(args)[:100]} -> {rc} in {time.monotonic() - started:.1f}s", flush=True)
    return rc, out


def enable_swap() -> None:
    """A swap file, so Figure 4(a) can show a task using swap beyond its memory limit."""
    swap = Path("/swapfile")
    for args in (["dd", "if=/dev/zero", f"of={swap}", "bs=1M", "count=768", "status=none"],
                 ["chmod", "600", str(swap)], ["mkswap", "-q", str(swap)], ["swapon", str(swap)]):
        subprocess.run(args, check=False, capture_output=True)


NET_MODULES = ("veth", "bridge", "sch_htb", "nf_tables", "nft_chain_nat", "nft_masq")


def net_modules() -> dict[str, object]:
    """The task-network modules (images.py puts them in the rootfs; systemd-modules-load
    loads them at boot): modprobe'd again to be sure, and listed from /proc/modules."""
    done = subprocess.run(["modprobe", "-a", *NET_MODULES], capture_output=True, text=True)
    loaded = {line.split()[0] for line in Path("/proc/modules").read_text().splitlines()}
    return {"modprobe_rc": done.returncode, "modprobe_stderr": done.stderr.strip(),
            "loaded": sorted(m for m in NET_MODULES if m in loaded)}


def system_tests() -> dict[str, object]:
    """The system and fault tests marked `guest` (selection.py): the ones whose code differs
    between cgroup v1 and v2 (the log cap and its 500 MiB flood among them, at runtime level
    in tests/system/test_task_isolation.py), and the firewall. The rest of tests/system has
    nothing cgroup-version-specific: the host runs it, without software emulation's cost."""
    enable_swap()
    # TCL_VM_GUEST: the tests that change the real firewall (masquerade) run here only.
    # TCL_TEST_TIME_SCALE (testkit/patience.py): a master's start alone took over 60 s here
    # on a busy host, so the waits for daemons get five times the host's bounds.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "TCL_VM_GUEST": "1", "TCL_TEST_TIME_SCALE": "5"}
    started = time.monotonic()
    # -o timeout: software emulation is several times slower than the host, whose per-test
    # limit (pyproject) is set for it; the whole run's limit is the timeout below.
    rc, out = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-s", "-rs", "--durations=15",
                   "-o", "timeout=2000", "--junitxml", str(SHARE / "junit.xml"), *GUEST_TESTS],
                  "system-tests.log", timeout=2700, env=env)
    tail = [line for line in out.splitlines() if " passed" in line or " failed" in line or "error" in line.lower()]
    return {"rc": rc, "summary": tail[-1] if tail else out[-300:], "seconds": round(time.monotonic() - started, 1)}


def install_units() -> None:
    Path("/opt/tcluster").mkdir(parents=True, exist_ok=True)
    if not Path("/opt/tcluster/bin").exists():
        Path("/opt/tcluster/bin").symlink_to(BIN)
    for unit in UNITS:
        shutil.copy(REPO / "systemd" / unit, Path("/etc/systemd/system") / unit)
    # The master's unit runs as tcluster, which tcluster-master's postinst creates (and its purge keeps).
    subprocess.run(["systemd-sysusers", str(REPO / "packaging" / "deb" / "tcluster-master.sysusers")], check=False)
    Path("/etc/tcluster").mkdir(exist_ok=True)
    for conf in ("master.toml", "agent.toml"):     # the units read them (--config), as the package installs them
        shutil.copy(REPO / "systemd" / conf, Path("/etc/tcluster") / conf)
    Path("/etc/tcluster/master.env").write_text('TCL_MASTER_ARGS="--listen 127.0.0.1:7070 --heartbeat-interval-s 0.5"\n')
    Path("/etc/tcluster/agent.env").write_text(
        'TCL_AGENT_ARGS="--master 127.0.0.1:7070 --node vm1 --cpus 2 --memory 1Gi"\n'
        f'TCL_SHIM={os.environ.get("TCL_SHIM", "")}\n')
    subprocess.run(["systemctl", "daemon-reload"], check=True)


def timed(timings: dict[str, float], name: str, step: Callable[[], T]) -> T:
    started = time.monotonic()
    try:
        return step()
    finally:
        timings[name] = round(time.monotonic() - started, 1)
        print(f"[guest] phase {name}: {timings[name]}s", flush=True)


def package() -> None:
    """The package's checks on a system like a fresh one (they cover what the units do under
    systemd: verified, started, the agent restarted under a running task); its purge removes
    what it installed, and secure_before_reboot installs systemd/'s units by hand."""
    try:
        guest_package.run_all(SHARE / "pkg")
    except Exception as error:     # recorded beside the steps: the host's tests say it broke here
        (SHARE / "package-error.txt").write_text(repr(error))


def secure_before_reboot() -> dict[str, object]:
    install_units()
    return guest_secure.before_reboot()


def main() -> int:
    os.chdir(REPO)
    entrypoints.write(REPO / "pyproject.toml", BIN)     # the image's may be older than the repo's
    if guest_secure.REBOOT_MARKER.exists():     # the second boot: only what must hold after a reboot
        return guest_secure.finish_after_reboot()
    started = SHARE / "guest-started"
    if started.exists():                        # a reboot nobody asked for (a panic?): do not run it all again
        print("[guest] unexpected reboot: the checks already ran once in this run", flush=True)
        return 1
    started.write_text("1")
    # Seconds from the kernel's start to this script: the boot's share of the guest's time.
    timings: dict[str, float] = {"boot": round(float(Path("/proc/uptime").read_text().split()[0]), 1)}
    results: dict[str, object] = {"kernel": os.uname().release, "timings": timings,
                                  "controllers": Path("/sys/fs/cgroup/cgroup.controllers").read_text().split()}
    results["net_modules"] = timed(timings, "net_modules", net_modules)
    results["system_tests"] = timed(timings, "system_tests", system_tests)
    timed(timings, "package", package)       # package-results.json, read by test_package.py
    results["secure"] = {"before": timed(timings, "secure_before_reboot", secure_before_reboot)}
    (SHARE / "results.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))
    if results["secure"]["before"]["reboot"]:   # type: ignore[index]
        guest_secure.reboot_now()
    return 0


if __name__ == "__main__":
    sys.exit(main())
