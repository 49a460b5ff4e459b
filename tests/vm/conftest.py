"""The one guest boot every tests/vm test reads (session fixture `guest`), started in a
thread as soon as the session has collected its tests, so it runs beside the host's tests.

While the images are built and the guest boots and runs the system tests, a thread here
builds the Debian packages (tcluster and tcluster-master, of this version and a higher one,
for the upgrade check; the `packages` fixture hands them to the host's checks too);
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
from tests.vm.qemu import REPO, boot, boot_with_a_retry, compile_for_the_guest, qemu_missing

GUEST_SCRIPT = """set -u
export TCL_SHIM=/mnt/share/tcl-shim
cd /mnt/repo && /opt/tcl-venv/bin/python tests/vm/guest_checks.py
"""
# A cap, not the expected time: on a busy 2-core host software emulation is several times
# slower, and the guest runs beside the host's tests; the guest's runner unit stops run.sh
# after 3900 s (at 68d361f its system tests alone took 2364 s of their 2400 s cap, beside a
# host suite that had grown: now 2700).
GUEST_TIMEOUT_S = 4100
# The guest's (and the image build's) niceness beside the host's tests. At 10 it got a tenth
# of a core while they ran and every Python start in it took a minute (CI, 7b595d7: its
# system tests passed the 2400 s cap); at 0 it is the CPU hog the host's tests must survive
# anyway, and it is done soon after them. TCL_VM_NICE overrides it.
GUEST_NICENESS = int(os.environ.get("TCL_VM_NICE", "0"))


def _why_not() -> str | None:
    if os.environ.get("TCL_SKIP_VM"):
        return "TCL_SKIP_VM is set"
    if os.geteuid() != 0:
        return "needs root (debootstrap, image build)"
    return qemu_missing()


def project_version() -> str:
    with open(REPO / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def _outside_this_venv() -> dict[str, str]:
    """The environment for make in a fresh checkout: its own .venv, not the suite's."""
    return {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}


def _build_deb(out: Path, version: str, checkout: Path | None = None) -> list[Path]:
    """Both packages of one version: tcluster's, then tcluster-master's. In `checkout` (see
    fresh_checkout): by `make deb`, as a user builds them; else by the builder, with this venv."""
    if checkout is None:
        command = [sys.executable, str(REPO / "packaging" / "build_deb.py"), "--out", str(out), "--version", version]
    else:
        command = ["make", "-C", str(checkout), "--no-print-directory", "deb", f"VERSION={version}", f"OUT={out}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900,
                          env=_outside_this_venv())
    if done.returncode != 0:
        raise RuntimeError(f"building the package {version} failed ({' '.join(command[:5])}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return [Path(line) for line in done.stdout.strip().splitlines()[-2:]]


def fresh_checkout(dest: Path) -> Path:
    """A fresh clone of this repository with the uncommitted work put on it (the diff to HEAD
    and the untracked files git does not ignore: the tree under test, stamped HEAD+dirty as
    the tree itself would be), and the venv `make dev` makes (`make venv`, its
    prerequisite): the issue's order, `make deb` after `make dev`, from nothing this session
    built."""
    def git(*args: str, cwd: Path = REPO, stdin: bytes | None = None) -> bytes:
        return subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, check=True,
                              timeout=300).stdout
    git("clone", "-q", str(REPO), str(dest))
    diff = git("diff", "HEAD", "--binary")
    if diff:
        git("apply", "--whitespace=nowarn", "-", cwd=dest, stdin=diff)
    for name in filter(None, git("ls-files", "-z", "--others", "--exclude-standard").decode().split("\0")):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    made = subprocess.run(["make", "-C", str(dest), "--no-print-directory", "venv"], capture_output=True, text=True,
                          timeout=900, env=_outside_this_venv())
    if made.returncode != 0:
        raise RuntimeError(f"make venv in a fresh checkout failed:\n{made.stdout[-2000:]}\n{made.stderr[-4000:]}")
    return dest


def build_packages(pkg: Path, version: str, timings: dict[str, float]) -> None:
    """Both versions into pkg/ by `make deb` in a fresh checkout after `make venv` (what
    `make dev` runs first), then pkg/ready: the file names in install order, or the error
    (the guest then skips its package checks and the host's tests show why); then lintian
    over the first version (pkg/lintian.json), still beside the guest: its minutes (a perl
    pass over scipy's files) overlap the guest's run instead of adding to the suite's end."""
    started = time.monotonic()
    first: list[Path] = []
    checkout = pkg.parent.with_name(f"{pkg.parent.name}-checkout")    # beside the share, not in it
    try:
        fresh_checkout(checkout)
        timings["fresh_venv"] = round(time.monotonic() - started, 1)
        first = _build_deb(pkg, version, checkout)
        second = _build_deb(pkg, f"{version}.post1", checkout)
        ready: dict[str, Any] = {"first": [p.name for p in first], "second": [p.name for p in second]}
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        ready = {"error": str(e)}
    finally:
        shutil.rmtree(checkout, ignore_errors=True)     # its venv: about a gigabyte
    timings["packages_built"] = round(time.monotonic() - started, 1)
    (pkg / "ready.tmp").write_text(json.dumps(ready))
    os.replace(pkg / "ready.tmp", pkg / "ready")    # atomic: the guest never reads half of it
    if first:
        started = time.monotonic()
        (pkg / "lintian.tmp").write_text(json.dumps(run_lintian(first)))
        os.replace(pkg / "lintian.tmp", pkg / "lintian.json")
        timings["lintian"] = round(time.monotonic() - started, 1)


LINTIAN_TIMEOUT_S = 1800


def run_lintian(debs: list[Path]) -> dict[str, Any]:
    """lintian's verdict on the packages: its error lines (E:) and the tail of its output, or
    why it did not run."""
    if shutil.which("lintian") is None:
        return {"skip": "lintian is not installed (apt-get install lintian; .ci/run does)"}
    try:
        done = subprocess.run(["lintian", "--no-tag-display-limit", *map(str, debs)], capture_output=True,
                              text=True, timeout=LINTIAN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"errors": [f"lintian ran past {LINTIAN_TIMEOUT_S} s"], "tail": ""}
    errors = [line for line in done.stdout.splitlines() if line.startswith("E:")]
    return {"errors": errors[:50], "tail": done.stdout[-4000:] + done.stderr[-1000:]}


def _prepare_and_boot(share: Path, qemu: list[subprocess.Popen[bytes]]) -> dict[str, Any]:
    """Everything the guest needs, then the boot; returns the results the tests read, with
    the [vm] lines to print. Raises pytest's skip or fail outcomes with the reason."""
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
    run, lines = boot_with_a_retry(lambda timeout_s: boot(
        images, share, GUEST_SCRIPT, timeout_s=timeout_s, allow_reboot=True,   # one reboot: guest_secure.py
        started=qemu.append), share, GUEST_TIMEOUT_S)
    packages.join()
    timings["guest"] = round(run.seconds, 1)
    lines.insert(0, f"[vm] {compiled} files compiled for the guest; rc={run.rc}; host phases (s): {json.dumps(timings)}")
    results_file = share / "results.json"
    if not results_file.exists():
        pytest.fail("\n".join([f"the guest wrote no results (rc={run.rc}):", *lines[1:], run.out[-3000:], run.console[-3000:]]))
    results: dict[str, Any] = json.loads(results_file.read_text())
    lines.append(f"[vm] guest phases (s): {json.dumps(results.get('timings', {}))}")
    package_file = share / "package-results.json"
    results["package"] = json.loads(package_file.read_text()) if package_file.exists() else {}
    lines.append(f"[vm] package steps (s): "
                 f"{json.dumps({k: v.get('seconds') for k, v in results['package'].items() if isinstance(v, dict)})}")
    results["share"] = str(share)
    results["version"] = version
    results["lines"] = lines
    return results


class _GuestRun:
    """The guest's whole run in a thread of its own. Started as soon as the session has
    collected its tests (tests/vm runs last), it overlaps the host's tests instead of
    adding its ~20 minutes after them; at GUEST_NICENESS.
    TCL_VM_SERIAL=1 boots it in the fixture instead, as before."""

    def __init__(self, share: Path, niceness: int) -> None:
        self.qemu: list[subprocess.Popen[bytes]] = []
        self.result: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.share, self.niceness = share, niceness
        self.thread = threading.Thread(target=self._run, name="tcl-vm-guest", daemon=True)

    def _run(self) -> None:
        # Linux: nice() applies to the calling thread, and what it starts inherits it (the
        # image build, both package builds, qemu); the host's tests keep nice 0.
        if self.niceness:
            os.nice(self.niceness)
        try:
            self.result = _prepare_and_boot(self.share, self.qemu)
        except BaseException as e:       # pytest's skip/fail outcomes too: re-raised in the fixture
            self.error = e

    def wait(self) -> dict[str, Any]:
        self.thread.join()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    def stop(self) -> None:
        """A session that ends before the vm tests (interrupted, -x) stops its qemu by pid."""
        for proc in self.qemu:
            if proc.poll() is None:
                proc.kill()


_background: _GuestRun | None = None


def pytest_collection_finish(session: pytest.Session) -> None:
    global _background
    wanted = any(item.get_closest_marker("vm") for item in session.items)
    if not wanted or _why_not() or os.environ.get("TCL_VM_SERIAL") or session.config.option.collectonly:
        return
    share = session.config._tmp_path_factory.mktemp("vm-share")   # type: ignore[attr-defined]
    _background = _GuestRun(share, niceness=GUEST_NICENESS)
    _background.thread.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _background is not None:
        _background.stop()


@pytest.fixture(scope="session")
def packages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The first version's packages by name (tcluster, tcluster-master), as soon as the
    background build has them (the guest is not waited for); built here when no guest runs."""
    if _background is not None:
        ready_file = _background.share / "pkg" / "ready"
        deadline = time.monotonic() + 2400
        while not ready_file.exists() and _background.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(2)
        ready = json.loads(ready_file.read_text()) if ready_file.exists() else {"error": "the packages were never built"}
        if "error" in ready:
            pytest.fail(ready["error"])
        paths = [_background.share / "pkg" / name for name in ready["first"]]
    else:
        paths = _build_deb(tmp_path_factory.mktemp("pkg"), project_version())
    return {path.name.split("_")[0]: path for path in paths}


@pytest.fixture(scope="session")
def lintian(packages: dict[str, Path]) -> dict[str, Any]:
    """run_lintian's report on the first version's packages: the background build's (written
    once lintian is done), or run here when no guest runs."""
    if _background is not None:
        report = _background.share / "pkg" / "lintian.json"
        deadline = time.monotonic() + LINTIAN_TIMEOUT_S + 600
        while not report.exists() and _background.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(2)
        if report.exists():
            return dict(json.loads(report.read_text()))
    return run_lintian(list(packages.values()))


@pytest.fixture(scope="session")
def guest(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    if _background is not None:
        results = _background.wait()
    else:
        results = _prepare_and_boot(tmp_path_factory.mktemp("vm-share"), [])
    print("\n" + "\n".join(results["lines"]))
    return results
