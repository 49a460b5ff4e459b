"""The Debian packages on a real systemd host: `make deb`'s builder makes tcluster and
tcluster-master on the host (this version and a higher one, while the guest runs its other
checks); their contents, control fields and lintian are checked here as soon as they are
built, and the guest with no network installs, joins, runs the master as its own user,
upgrades while a task runs, survives a watchdog restart, removes and purges
(tests/vm/guest_package.py says each step). The same boot as
test_vm.py (the session fixture `guest`, tests/vm/conftest.py); `pytest
tests/vm/test_package.py` alone still runs every guest check, as that boot does."""

from __future__ import annotations

import json
import re
import subprocess
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


def test_the_master_runs_as_its_user_confined_and_a_config_error_does_not_loop(guest: dict[str, Any]) -> None:
    step = _package(guest, "install")
    assert step["master_user"] == "tcluster" and step["ca_key"] == "tcluster 600", step
    assert step["security"]["tcl-master.service"] <= 3.0 and step["security"]["tcl-gm.service"] <= 3.0, \
        (step["security"], _log(guest, "security-tcl-master.service.log"))
    assert step["gm_start_rc"] != 0, step      # the shipped gm.toml names no LM: exit 2
    assert step["gm_after_exit_2"] == {"ActiveState": "failed", "NRestarts": "0", "ExecMainStatus": "2"}, step


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
    assert cgroup.startswith("0::/tcluster.slice/tcl-tasks-vm3.scope/tasks/") and rest == "done\n", step["logs"]
    scope = step["scope"]       # a scope systemd delegated, held by its keeper in a leaf
    assert (scope["ActiveState"], scope["Delegate"], scope["Slice"]) == ("active", "yes", "tcluster.slice"), scope
    assert scope["ControlGroup"] == "/tcluster.slice/tcl-tasks-vm3.scope" and len(scope["keeper"]) == 1, scope


def test_stopping_the_task_scope_ends_the_tasks_and_the_next_task_gets_a_new_one(guest: dict[str, Any]) -> None:
    step = _package(guest, "scope")
    assert step.get("running") and step["stop_rc"] == 0, step
    assert step["first_state"] in ("FAILED", "KILLED"), step
    assert step["second_succeeded"], step
    assert step["second_logs"].startswith("0::/tcluster.slice/tcl-tasks-vm3.scope/tasks/"), step
    assert step["scope"]["ActiveState"] == "active" and len(step["scope"]["keeper"]) == 1, step


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
    assert step["leftover_groups"] == [] and not step["scope_left"], step


def _contents(deb: Path) -> dict[str, int]:
    """Path -> size of each regular file and link in the package."""
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    out = {}
    for line in listing.splitlines():
        fields = line.split(None, 5)
        if fields[0][0] in "-l":
            out[fields[5].split(" -> ")[0].removeprefix("./")] = int(fields[2])
    return out


def _field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True).stdout.strip()


def test_the_node_package_has_no_master_library_and_the_master_package_the_rest(packages: dict[str, Path]) -> None:
    node, master = _contents(packages["tcluster"]), _contents(packages["tcluster-master"])
    assert not set(node) & set(master)
    site = "opt/tcluster/venv/lib/python3.11/site-packages/"
    for lib in ("numpy/", "scipy/", "aiohttp/", "prometheus_client/", "orjson/", "aetcd/", "cryptography/",
                "tcluster/master/", "tcluster/scheduler/", "tcluster/sim/", "tcluster/gm/", "tcluster/pack/",
                "tcluster/etcd/", "tcluster/federation/"):
        assert not any(p.startswith(site + lib) for p in node), lib
        assert any(p.startswith(site + lib) for p in master), lib
    for path in ("usr/bin/tcl", "usr/bin/tcl-agent", "lib/systemd/system/tcl-agent.service", "etc/tcluster/agent.toml",
                 "usr/share/doc/tcluster/copyright", "usr/share/doc/tcluster/changelog.Debian.gz",
                 "usr/share/man/man1/tcl.1.gz", "usr/share/man/man8/tcl-agent.8.gz", "opt/tcluster/install.sh",
                 site + "tcluster/agent/main.py", site + "grpc/__init__.py"):
        assert path in node, path
    for path in ("usr/bin/tcl-master", "usr/bin/tcl-gm", "lib/systemd/system/tcl-master.service",
                 "lib/systemd/system/tcl-gm.service", "etc/tcluster/master.toml", "etc/tcluster/gm.toml",
                 "usr/lib/sysusers.d/tcluster-master.conf", "usr/share/doc/tcluster-master/copyright",
                 "usr/share/tcluster/dashboards/prometheus/tcluster-alerts.yml",
                 "usr/share/tcluster/dashboards/grafana/tcluster.json", "usr/share/man/man8/tcl-master.8.gz"):
        assert path in master, path
    version = _field(packages["tcluster"], "Version")
    assert f"tcluster (= {version})" in _field(packages["tcluster-master"], "Depends")
    # Sizes, measured at 0.1.0: tcluster 12.7 MB (34,812 KiB of files, grpc's and pydantic's
    # libraries 21,615 of them; Installed-Size 44,766 with the bytecode), tcluster-master
    # 50.1 MB; the single package was 67 MB (202 MiB of files).
    node_kib, master_kib = (sum(sizes.values()) // 1024 for sizes in (node, master))
    assert node_kib < 40_000 and int(_field(packages["tcluster"], "Installed-Size")) < 50_000, node_kib
    assert packages["tcluster"].stat().st_size < 15_000_000, packages["tcluster"].stat().st_size
    assert master_kib < 180_000, master_kib


def test_lintian_finds_no_errors(lintian: dict[str, Any]) -> None:
    """Errors only: the /opt venv's consequences are overridden with their reason
    (packaging/deb/lintian-overrides); warnings about the wheels' own files remain. lintian
    runs beside the guest, once the packages are built (tests/vm/conftest.py)."""
    if "skip" in lintian:
        pytest.skip(lintian["skip"])
    assert lintian["errors"] == [], lintian["tail"]
