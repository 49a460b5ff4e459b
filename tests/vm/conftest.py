"""The one guest boot every tests/vm test reads (session fixture `guest`).

While the images are built and the guest boots and runs the system tests, a thread here
builds the two Debian packages (this version and a higher one, for the upgrade check);
the guest waits for them (share/pkg/ready) only when it reaches the package checks
(guest_package.py), so the package build costs no wall time of its own. Every phase's
seconds are printed with the results ([vm] lines in the test log)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tcluster.agent.runtime.shimbin import shim_binary
from tests.vm.images import build_all
from tests.vm.qemu import REPO, boot, compile_for_the_guest, qemu_missing

GUEST_SCRIPT = """set -u
export TCL_SHIM=/mnt/share/tcl-shim
cd /mnt/repo && /opt/tcl-venv/bin/python tests/vm/guest_checks.py
"""
# A cap, not the expected time: on a busy 2-core host software emulation is several times
# slower; the guest's runner unit stops run.sh after 2700 s in any case.
GUEST_TIMEOUT_S = 2900


def _why_not() -> str | None:
    if os.environ.get("TCL_SKIP_VM"):
        return "TCL_SKIP_VM is set"
    if os.geteuid() != 0:
        return "needs root (debootstrap, image build)"
    return qemu_missing()


def project_version() -> str:
    with open(REPO / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def _build_deb(out: Path, version: str) -> Path:
    done = subprocess.run([sys.executable, str(REPO / "packaging" / "build_deb.py"), "--out", str(out),
                           "--version", version], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"building the package {version} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def build_packages(pkg: Path, version: str, timings: dict[str, float]) -> None:
    """Both packages into pkg/, then pkg/ready: the names in install order, or the error
    (the guest then skips its package checks and the host's tests show why)."""
    started = time.monotonic()
    try:
        first = _build_deb(pkg, version)
        second = _build_deb(pkg, f"{version}.post1")
        ready: dict[str, Any] = {"first": first.name, "second": second.name}
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        ready = {"error": str(e)}
    timings["packages_built"] = round(time.monotonic() - started, 1)
    (pkg / "ready.tmp").write_text(json.dumps(ready))
    os.replace(pkg / "ready.tmp", pkg / "ready")    # atomic: the guest never reads half of it


@pytest.fixture(scope="session")
def guest(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    share = tmp_path_factory.mktemp("vm-share")
    (share / "pkg").mkdir()
    version = project_version()
    timings: dict[str, float] = {}
    packages = threading.Thread(target=build_packages, args=(share / "pkg", version, timings), daemon=True)
    packages.start()
    started = time.monotonic()
    try:
        images = build_all(timings)
    except (RuntimeError, OSError) as e:
        packages.join()
        pytest.skip(f"cannot build the VM images: {e}")
    timings["images"] = round(time.monotonic() - started, 1)
    shutil.copy(shim_binary(), share / "tcl-shim")      # static: runs in the guest as is
    compiled = compile_for_the_guest()
    run = boot(images, share, GUEST_SCRIPT, timeout_s=GUEST_TIMEOUT_S, allow_reboot=True)   # one reboot: guest_secure.py
    packages.join()
    timings["guest"] = round(run.seconds, 1)
    print(f"\n[vm] {compiled} files compiled for the guest; rc={run.rc}; host phases (s): {json.dumps(timings)}")
    results_file = share / "results.json"
    if not results_file.exists():
        pytest.fail(f"the guest wrote no results (rc={run.rc}):\n{run.out[-3000:]}\n{run.console[-3000:]}")
    results: dict[str, Any] = json.loads(results_file.read_text())
    print(f"[vm] guest phases (s): {json.dumps(results.get('timings', {}))}")
    package_file = share / "package-results.json"
    results["package"] = json.loads(package_file.read_text()) if package_file.exists() else {}
    print(f"[vm] package steps (s): "
          f"{json.dumps({k: v.get('seconds') for k, v in results['package'].items() if isinstance(v, dict)})}")
    results["share"] = str(share)
    results["version"] = version
    return results
