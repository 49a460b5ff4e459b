"""The Debian package on a real systemd host: `make deb`'s builder makes two packages on the
host (this version and a higher one, while the guest runs its other checks), and the
guest with no network installs, joins, upgrades while a task runs, survives a watchdog
restart, removes and purges (tests/vm/guest_package.py says each step). The same boot as
test_vm.py (the session fixture `guest`, tests/vm/conftest.py); `pytest
tests/vm/test_package.py` alone still runs every guest check, as that boot does."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

# The first test waits for the guest's whole run (GUEST_TIMEOUT_S, 4100 s at most): above
# pyproject's per-test timeout, which is for the host's tests.
pytestmark = [pytest.mark.vm, pytest.mark.timeout(4500)]


def _package(guest: dict[str, Any], step: str) -> dict[str, Any]:
    """The step's results; a failed package build or a guest that never got there says why."""
    ready = Path(guest["share"]) / "pkg" / "ready"
    error = json.loads(ready.read_text()).get("error") if ready.exists() else "the packages were never built"
    assert error is None, error
    crashed = Path(guest["share"]) / "package-error.txt"
    assert step in guest["package"], (f"the guest recorded no package step {step!r}", guest["package"],
                                      crashed.read_text() if crashed.exists() else "")
    return dict(guest["package"][step])


def _log(guest: dict[str, Any], name: str) -> str:
    path = Path(guest["share"]) / name
    return path.read_text(errors="replace")[-4000:] if path.exists() else f"({name} not written)"


def test_install_from_the_package_join_and_start(guest: dict[str, Any]) -> None:
    step = _package(guest, "install")
    assert step.get("dpkg_rc") == 0, (step, _log(guest, "dpkg-install.log"))
    # the package's own build stamps its commit (tcluster/version.py)
    assert re.fullmatch(rf"tcl-agent {re.escape(guest['version'])} \(commit ([0-9a-f]{{12}}(\+dirty)?|unknown)\)",
                        step["version"]) and step["on_path"] == [True] * 3, step
    assert step["verify"] == [0, ""], step["verify"]
    assert (step["master_start_rc"], step["token_rc"]) == (0, 0), (step, _log(guest, "master-init.log"))
    assert step["install_sh_rc"] == 0 and step["doctor_failed"] == [], (step, _log(guest, "install-sh.log"))
    assert step["agent_active"] == "active" and step["node_ready"], step


def test_upgrade_restarts_the_agent_and_the_task_survives(guest: dict[str, Any]) -> None:
    step = _package(guest, "upgrade")
    assert step.get("submitted") and step["running"], step
    assert step["install_sh_rc"] == 0, (step, _log(guest, "upgrade.log"))
    assert step["dpkg_version"] == f"{guest['version']}.post1-1" and step["version"].split()[1].endswith(".post1"), step
    assert step["agent_pid_after"] != step["agent_pid_before"] and step["agent_active"] == "active", step
    assert step["new_agent_started"], step
    assert step["toml_untouched"], step
    assert step["running_after"] == "RUNNING" and step["node_ready"], step
    assert step["succeeded"] and step["attempts"] == [1], step   # its first attempt
    assert step["agent_cgroup"].endswith("/system.slice/tcl-agent.service"), step["agent_cgroup"]
    cgroup, _, rest = step["logs"].partition("\n")
    assert "/tcluster/" in cgroup and rest == "done\n", step["logs"]


def test_the_watchdog_restarts_a_hung_agent(guest: dict[str, Any]) -> None:
    step = _package(guest, "watchdog")
    assert step.get("hung") and step["watchdog_in_journal"], (step, _log(guest, "journal-watchdog.log"))
    assert step["restarted"] and step["active_after"] and step["node_ready_after"], step


def test_remove_keeps_config_and_state_and_purge_removes_them(guest: dict[str, Any]) -> None:
    step = _package(guest, "remove")
    assert step.get("remove_rc") == 0, (step, _log(guest, "dpkg-remove.log"))
    assert not (step["opt_left"] or step["bin_left"] or step["units_left"] or step["agent_running"]), step
    assert step["config_kept"] and step["state_kept"], step
    assert step["purge_rc"] == 0 and not step["etc_left"] and not step["state_left"], (step, _log(guest, "dpkg-purge.log"))
    assert step["dpkg_status"] in ("", "unknown ok not-installed"), step
    assert step["leftover_groups"] == [], step
