"""`tcl doctor`'s checks (agent/preflight.py) as tables over canned facts, and the command's
output and exit code."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tcluster.agent import preflight
from tcluster.agent.preflight import FAIL, OK, SKIP, Check
from tcluster.agent.runtime.detect import CgroupMounts
from tcluster.cli import doctor

V2 = CgroupMounts(v2="/sys/fs/cgroup")
V2_ALL = {"cpuset", "cpu", "io", "memory", "pids"}
HYBRID = CgroupMounts(v2="/sys/fs/cgroup/unified", v1=tuple(sorted(
    (c, f"/sys/fs/cgroup/{c}") for c in ("cpu", "cpuacct", "memory", "pids", "freezer"))))
NONE = CgroupMounts()


@pytest.mark.parametrize("mounts, controllers, status, detail", [
    (V2, V2_ALL, OK, "cgroup v2 at /sys/fs/cgroup"),
    (HYBRID, {"hugetlb"}, OK, "cgroup v1 (a cgroup2 mount at /sys/fs/cgroup/unified too: hybrid)"),
    (V2, {"cpu", "memory"}, FAIL, "no usable cgroup hierarchy"),
    (NONE, set(), FAIL, "no usable cgroup hierarchy"),
])
def test_cgroups(mounts: CgroupMounts, controllers: set[str], status: str, detail: str) -> None:
    check = preflight.cgroups(mounts, controllers)
    assert (check.status, check.detail) == (status, detail)
    if status == FAIL:
        assert "fix:" in check.fix             # detect.py's own fix for each backend


@pytest.mark.parametrize("mounts, controllers, status, detail", [
    (V2, V2_ALL, OK, "cpu memory pids io"),
    (V2, V2_ALL - {"io"}, OK, "cpu memory pids; without io (no io.weight/io.stat)"),
    (HYBRID, set(), OK, "cpu cpuacct memory pids freezer"),
    (NONE, set(), FAIL, "none usable (see cgroups)"),
])
def test_controllers(mounts: CgroupMounts, controllers: set[str], status: str, detail: str) -> None:
    assert (preflight.controllers(mounts, controllers).status, preflight.controllers(mounts, controllers).detail) \
        == (status, detail)


def test_delegation_without_systemd_run_fails_naming_where_tasks_would_go() -> None:
    check = preflight.delegation(V2, V2_ALL, True, "yes", 0, systemd_run=False)
    assert check.status == FAIL and "tcluster/<node>" in check.detail and "systemd-run" in check.fix, check
    assert "tcl-tasks-<node>.scope" in preflight.delegation(V2, V2_ALL, True, "yes", 0).detail


@pytest.mark.parametrize("mounts, systemd, delegate, euid, status", [
    (V2, True, "yes", 0, OK),
    (V2, True, "no", 0, FAIL),
    (V2, True, None, 0, SKIP),            # the unit is not installed yet
    (V2, False, None, 0, OK),             # no systemd: the agent owns its subtree as root
    (V2, False, None, 1000, FAIL),
    (HYBRID, True, "no", 0, OK),          # v1 needs no delegation
    (NONE, True, "yes", 0, SKIP),
])
def test_delegation(mounts: CgroupMounts, systemd: bool, delegate: str | None, euid: int, status: str) -> None:
    check = preflight.delegation(mounts, V2_ALL if mounts is V2 else set(), systemd, delegate, euid)
    assert check.status == status, check
    if status == FAIL:
        assert check.fix


def test_namespaces() -> None:
    assert preflight.namespaces({"pid", "mnt", "uts", "ipc", "net"}, {"pid": 100}).status == OK
    missing = preflight.namespaces({"mnt", "uts", "ipc"}, {})
    assert missing.status == FAIL and "pid" in missing.detail and "--no-namespaces" in missing.fix
    capped = preflight.namespaces({"pid", "mnt", "uts", "ipc"}, {"pid": 0})
    assert capped.status == FAIL and capped.fix.startswith("sysctl -w user.max_pid_namespaces=")
    assert "task networks unavailable" in preflight.namespaces({"pid", "mnt", "uts", "ipc"}, {}).detail


def test_shim_root_pidfd_identity() -> None:
    assert preflight.shim("/x/tcl-shim", None, 2, "error usage: tcl-shim SPEC\n").status == OK
    assert preflight.shim("/x/tcl-shim", None, 126, "").status == FAIL
    assert preflight.shim("/x/tcl-shim", "Exec format error", None, "").detail.endswith("Exec format error")
    assert preflight.shim(None, "no C compiler", None, "").fix == "no C compiler"
    assert preflight.root(0).status == OK and preflight.root(1000).status == FAIL
    assert preflight.pidfds(None).status == OK and preflight.pidfds("ENOSYS").status == FAIL
    assert preflight.joined("n1", "m:7070").status == OK
    assert preflight.joined(None, "m:7070").status == SKIP
    assert preflight.joined(None, "", "joined.json is damaged").status == FAIL


@pytest.mark.parametrize("skew, status, words", [
    (0.3, OK, "0.30s behind the master"),
    (-1.9, OK, "1.90s ahead of the master"),
    (5.0, FAIL, "5.00s behind the master"),
    (None, SKIP, "no master to compare with"),
])
def test_clock(skew: float | None, status: str, words: str) -> None:
    check = preflight.clock(skew)
    assert (check.status, check.detail) == (status, words)
    if status == FAIL:
        assert "ntp" in check.fix.lower()


def test_port_check_names_the_port_to_open() -> None:
    check = preflight.port("port", "10.0.0.1:7071", "Connection refused")
    assert check.status == FAIL and "TCP port 7071" in check.fix and "10.0.0.1" in check.fix


def _args(**kw: object) -> argparse.Namespace:
    return argparse.Namespace(**{"output": "table", "config": None, "state_dir": None, "master": "m:1", **kw})


def test_the_command_prints_each_check_and_fails_if_one_fails(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    checks = [Check("root", OK, "running as root"), Check("clock", FAIL, "5.00s behind the master", "use NTP"),
              Check("delegation", SKIP, "not installed")]
    monkeypatch.setattr(doctor, "run_checks", lambda args: checks)
    assert doctor.doctor(_args()) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["OK", "root", "running", "as", "root"]
    assert out[1].startswith("FAIL  clock") and out[2].strip() == "fix: use NTP"
    assert doctor.doctor(_args(output="json")) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and [c["status"] for c in data["checks"]] == [OK, FAIL, SKIP]
    monkeypatch.setattr(doctor, "run_checks", lambda args: [checks[0], checks[2]])
    assert doctor.doctor(_args()) == 0           # a SKIP is not a failure


def test_the_master_comes_from_the_agent_config_when_not_joined(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "agent.toml"
    conf.write_text(f'master = "127.0.0.1:1"\nstate_dir = "{tmp_path}/state"\n')
    monkeypatch.setattr(doctor, "clock_check", lambda address, ca: preflight.clock(None, f"asked {address}"))
    checks = doctor.master_checks(_args(config=conf))
    assert [c.name for c in checks] == ["identity", "port", "clock"]
    assert checks[0].status == SKIP and "127.0.0.1:1" in checks[0].detail
    assert checks[1].status == FAIL and checks[2].detail.endswith("(asked 127.0.0.1:1)")
