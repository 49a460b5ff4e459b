"""The Debian package on a real systemd host: `make deb`'s builder makes two packages here
(this version and a higher one), and a guest with no network installs, joins, upgrades
while a task runs, survives a watchdog restart, removes and purges
(tests/vm/guest_package.py says each step). One boot of its own; run it alone with
`pytest tests/vm/test_package.py`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.vm.images import build_all
from tests.vm.qemu import REPO, boot, qemu_missing

pytestmark = pytest.mark.vm
GUEST_SCRIPT = "set -u\ncd / && /opt/tcl-venv/bin/python /mnt/repo/tests/vm/guest_package.py\n"


def _why_not() -> str | None:
    if os.environ.get("TCL_SKIP_VM"):
        return "TCL_SKIP_VM is set"
    if os.geteuid() != 0:
        return "needs root (debootstrap, image build)"
    return qemu_missing()


def _project_version() -> str:
    import tomllib
    with open(REPO / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def build_deb(out: Path, version: str) -> Path:
    done = subprocess.run([sys.executable, str(REPO / "packaging" / "build_deb.py"), "--out", str(out),
                           "--version", version], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        pytest.fail(f"building the package failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def guest(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    try:
        images = build_all()
    except (RuntimeError, OSError) as e:
        pytest.skip(f"cannot build the VM images: {e}")
    share = tmp_path_factory.mktemp("vm-package")
    version = _project_version()
    started = time.monotonic()
    build_deb(share, version)
    time.sleep(1)                      # the guest orders the packages by mtime
    build_deb(share, f"{version}.post1")
    built_s = time.monotonic() - started
    run = boot(images, share, GUEST_SCRIPT, timeout_s=1500)
    print(f"\n[vm] two packages built in {built_s:.1f}s; guest ran in {run.seconds:.1f}s; rc={run.rc}")
    results_file = share / "package-results.json"
    if not results_file.exists():
        pytest.fail(f"the guest wrote no results (rc={run.rc}):\n{run.out[-3000:]}\n{run.console[-3000:]}")
    results: dict[str, Any] = json.loads(results_file.read_text())
    print(json.dumps({k: v.get("seconds") for k, v in results.items() if isinstance(v, dict)}))
    results["share"] = str(share)
    results["version"] = version
    return results


def _log(guest: dict[str, Any], name: str) -> str:
    path = Path(guest["share"]) / name
    return path.read_text(errors="replace")[-4000:] if path.exists() else f"({name} not written)"


def test_install_from_the_package_join_and_start(guest: dict[str, Any]) -> None:
    step = guest["install"]
    assert step.get("dpkg_rc") == 0, (step, _log(guest, "dpkg-install.log"))
    assert step["version"] == f"tcl-agent {guest['version']}" and step["on_path"] == [True] * 3, step
    assert step["verify"] == [0, ""], step["verify"]
    assert (step["master_start_rc"], step["token_rc"]) == (0, 0), (step, _log(guest, "master-init.log"))
    assert step["install_sh_rc"] == 0 and step["doctor_failed"] == [], (step, _log(guest, "install-sh.log"))
    assert step["agent_active"] == "active" and step["node_ready"], step


def test_upgrade_restarts_the_agent_and_the_task_survives(guest: dict[str, Any]) -> None:
    step = guest["upgrade"]
    assert step.get("submitted") and step["running"], step
    assert step["install_sh_rc"] == 0, (step, _log(guest, "upgrade.log"))
    assert step["dpkg_version"] == f"{guest['version']}.post1-1" and step["version"].endswith(".post1"), step
    assert step["agent_pid_after"] != step["agent_pid_before"] and step["agent_active"] == "active", step
    assert step["new_agent_started"], step
    assert step["toml_untouched"], step
    assert step["running_after"] == "RUNNING" and step["node_ready"], step
    assert step["succeeded"] and step["attempts"] == [1] and step["logs"] == "done\n", step   # its first attempt


def test_the_watchdog_restarts_a_hung_agent(guest: dict[str, Any]) -> None:
    step = guest["watchdog"]
    assert step.get("hung") and step["watchdog_in_journal"], (step, _log(guest, "journal-watchdog.log"))
    assert step["restarted"] and step["active_after"] and step["node_ready_after"], step


def test_remove_keeps_config_and_state_and_purge_removes_them(guest: dict[str, Any]) -> None:
    step = guest["remove"]
    assert step.get("remove_rc") == 0, (step, _log(guest, "dpkg-remove.log"))
    assert not (step["opt_left"] or step["bin_left"] or step["units_left"] or step["agent_running"]), step
    assert step["config_kept"] and step["state_kept"], step
    assert step["purge_rc"] == 0 and not step["etc_left"] and not step["state_left"], (step, _log(guest, "dpkg-purge.log"))
    assert step["dpkg_status"] in ("", "unknown ok not-installed"), step
    assert step["leftover_groups"] == [], step
