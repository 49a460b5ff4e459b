"""The delegated task scope (agent/runtime/taskscope.py): when the agent chooses it, where
its groups go, and how it asks systemd for it. The real scope, under systemd on cgroup v2,
is tests/vm/test_package.py's (the package's agent unit, restarted under a running task)."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import threading
from pathlib import Path

import pytest

import tcluster.agent.runtime as runtime_pkg
from tcluster.agent.runtime import Cgroup1Runtime, Cgroup2Runtime, RuntimeSetupError, make_runtime, taskscope
from tcluster.agent.runtime.detect import SCOPE, CgroupMounts, default_parent, plan_v2
from tcluster.agent.runtime.taskscope import TaskScope, start_command
from testkit.procs import wait_until

SERVICE = "/system.slice/tcl-agent.service"


@pytest.mark.parametrize("service, systemd_run, legacy, chosen", [
    (True, True, False, SCOPE),
    (False, True, False, None),      # by hand, `tcl dev`, a test runner: its own tcluster/<node>
    (True, False, False, None),      # no systemd-run: nothing to ask systemd with
    (True, True, True, None),        # tasks of the old layout still run: stay to re-adopt them
])
def test_the_scope_is_the_default_only_for_a_delegated_service(service: bool, systemd_run: bool, legacy: bool,
                                                                 chosen: str | None) -> None:
    assert default_parent(service, systemd_run, legacy) == chosen


def test_the_scope_layout() -> None:
    layout = plan_v2("n1", SCOPE, SERVICE)
    assert (layout.subtree, layout.agent_leaf) == ("tcluster.slice/tcl-tasks-n1.scope/tasks", None)


@pytest.fixture
def v2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "v2"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    monkeypatch.setattr(runtime_pkg, "host_mounts", lambda: (CgroupMounts(v2=str(root)), {"cpu", "io", "memory", "pids"}))
    monkeypatch.setattr(runtime_pkg, "own_cgroup_v2", lambda: SERVICE)
    monkeypatch.setattr(runtime_pkg, "is_delegated", lambda mount, own: own == SERVICE)
    monkeypatch.setattr(taskscope.shutil, "which", lambda name: f"/usr/bin/{name}")
    return root


def test_a_delegated_agent_unit_puts_its_tasks_in_the_scope(v2: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    rt = make_runtime("auto", "n1", tmp_path / "state")
    assert isinstance(rt, Cgroup2Runtime) and rt._subtree == "tcluster.slice/tcl-tasks-n1.scope/tasks"
    assert rt._scope is not None and rt._scope.group == v2 / "tcluster.slice" / "tcl-tasks-n1.scope"
    # run by hand (not a delegated service): the agent's own top-level tree, as before
    monkeypatch.setattr(runtime_pkg, "own_cgroup_v2", lambda: "/user.slice/session-4.scope")
    assert make_runtime("auto", "n1", tmp_path / "state")._subtree == "tcluster/n1"


def test_an_upgraded_agent_keeps_the_old_tree_while_its_tasks_run_there(v2: Path, tmp_path: Path) -> None:
    group = v2 / "tcluster" / "n1" / "cg.0"
    group.mkdir(parents=True)
    (group / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    rt = make_runtime("auto", "n1", tmp_path / "state")
    assert rt._subtree == "tcluster/n1" and rt._scope is None      # type: ignore[attr-defined]
    (group / "cgroup.events").write_text("populated 0\nfrozen 0\n")   # they ended (a killed agent's leftover)
    assert make_runtime("auto", "n1", tmp_path / "state")._subtree.startswith("tcluster.slice/")  # type: ignore[attr-defined]


def test_an_explicit_scope_on_cgroup_v1_is_the_default_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v1 = CgroupMounts(v1=tuple((c, str(tmp_path)) for c in ("cpu", "cpuacct", "freezer", "memory", "pids")))
    monkeypatch.setattr(runtime_pkg, "host_mounts", lambda: (v1, set[str]()))
    rt = make_runtime("auto", "n1", tmp_path, cgroup_parent="scope")
    assert isinstance(rt, Cgroup1Runtime) and rt._subtree == "tcluster/n1"


def test_no_systemd_run_is_a_setup_error_naming_the_fix(v2: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(taskscope.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeSetupError, match="needs systemd-run"):
        make_runtime("auto", "n1", tmp_path / "state", cgroup_parent="scope")


def test_the_scope_asked_for_is_delegated_unbounded_and_collected() -> None:
    command = start_command("n1", "/usr/bin/systemd-run", "/bin/sleep")
    assert command[:2] == ["/usr/bin/systemd-run", "--scope"]
    for wanted in ("--unit=tcl-tasks-n1.scope", "--slice=tcluster.slice", "--property=Delegate=yes",
                   "--property=TasksMax=infinity", "--collect"):
        assert wanted in command
    assert command[-3:] == ["--", "/bin/sleep", "infinity"]


def _fake_systemd_run(directory: Path, body: str) -> str:
    path = directory / "systemd-run"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_systemd_runs_refusal_is_the_setup_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_systemd_run(tmp_path, 'echo "Failed to start transient scope unit: Access denied" >&2; exit 1')
    monkeypatch.setattr(taskscope.shutil, "which", lambda name: fake if name == "systemd-run" else "/bin/sleep")
    scope = TaskScope(tmp_path / "v2", "n1", timeout_s=30)
    with pytest.raises(RuntimeSetupError, match="could not start tcl-tasks-n1.scope: Failed to start .* Access denied"):
        scope.ensure()      # at once: its exit is seen, not waited out


def test_a_new_scope_moves_its_keeper_into_the_keeper_leaf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # systemd-run, faked: it would move itself into the scope, then exec the keeper.
    fake = _fake_systemd_run(tmp_path, 'while [ "$1" != "--" ]; do shift; done; shift; exec "$@"')
    monkeypatch.setattr(taskscope.shutil, "which", lambda name: fake if name == "systemd-run" else "/bin/sleep")
    def in_scope(pid: int, group: str) -> bool:          # systemd made the scope's group, with it inside
        (tmp_path / "v2" / group).mkdir(parents=True, exist_ok=True)
        return group == "tcluster.slice/tcl-tasks-n1.scope"
    monkeypatch.setattr(taskscope, "_in_group", in_scope)
    moved: list[tuple[Path, str]] = []
    monkeypatch.setattr(taskscope, "write_file", lambda path, value: moved.append((path, value)))
    scope = TaskScope(tmp_path / "v2", "n1")
    assert scope.ensure() == "created"
    ((procs, pid),) = moved
    try:
        assert procs == tmp_path / "v2" / "tcluster.slice" / "tcl-tasks-n1.scope" / "keeper" / "cgroup.procs"
        # the pid moved is the keeper's: the same process, once systemd-run has exec'd it
        wait_until(lambda: Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2]
                   == [b"/bin/sleep", b"infinity"], 30)
        assert os.getsid(int(pid)) == int(pid)        # its own session: no signal to the agent's group reaches it
    finally:
        os.kill(int(pid), signal.SIGKILL)


def test_an_existing_scope_is_adopted_and_one_without_keeper_gets_one(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    keeper = tmp_path / "v2" / "tcluster.slice" / "tcl-tasks-n1.scope" / "keeper"
    keeper.mkdir(parents=True)
    (keeper / "cgroup.procs").write_text("4242\n")
    spawned: list[list[str]] = []
    monkeypatch.setattr(taskscope.shutil, "which", lambda name: f"/usr/bin/{name}")

    def spawn(args: list[str], **_: object) -> subprocess.Popen[bytes]:
        spawned.append(args)
        return subprocess.Popen(["true"])
    scope = TaskScope(tmp_path / "v2", "n1", spawn=spawn)
    assert scope.ensure() == "adopted" and spawned == []
    (keeper / "cgroup.procs").write_text("")       # its keeper was killed; tasks still hold it
    (keeper.parent / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    monkeypatch.setattr(taskscope, "write_file", lambda path, value: (keeper / "cgroup.procs").write_text(value))
    assert scope.ensure() == "kept" and spawned == [["/usr/bin/sleep", "infinity"]]
    assert (keeper / "cgroup.procs").read_text().isdigit()


def test_an_empty_scope_is_waited_out_then_made_anew_never_refilled(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """No keeper, no process: systemd is stopping it and removes its group. A keeper written
    into it would make cgroups no unit owns."""
    group = tmp_path / "v2" / "tcluster.slice" / "tcl-tasks-n1.scope"
    (group / "keeper").mkdir(parents=True)
    (group / "cgroup.events").write_text("populated 0\nfrozen 0\n")
    monkeypatch.setattr(taskscope.shutil, "which", lambda name: f"/usr/bin/{name}")
    created: list[str] = []
    scope = TaskScope(tmp_path / "v2", "n1", timeout_s=0.3)
    monkeypatch.setattr(scope, "_create", lambda: created.append("systemd-run"))
    with pytest.raises(RuntimeSetupError, match="systemd did not remove it"):
        scope.ensure()
    assert created == []
    timer = threading.Timer(0.1, shutil.rmtree, [group])         # systemd removes it meanwhile
    timer.start()
    scope._timeout_s = 30
    assert scope.ensure() == "created" and created == ["systemd-run"]
    timer.join()


def test_a_keeper_that_cannot_be_moved_is_killed_not_left_in_the_scopes_root(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    group = tmp_path / "v2" / "tcluster.slice" / "tcl-tasks-n1.scope"
    group.mkdir(parents=True)
    (group / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    monkeypatch.setattr(taskscope.shutil, "which", lambda name: "/bin/sleep" if name == "sleep" else "/usr/bin/systemd-run")

    def refuse(path: Path, value: str) -> None:
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(taskscope, "write_file", refuse)
    spawned: list[subprocess.Popen[bytes]] = []

    def spawn(args: list[str], **kw: object) -> subprocess.Popen[bytes]:
        spawned.append(subprocess.Popen(args, **kw))  # type: ignore[call-overload]
        return spawned[-1]
    with pytest.raises(RuntimeSetupError, match="cannot move the scope's keeper"):
        TaskScope(tmp_path / "v2", "n1", spawn=spawn).ensure()
    assert spawned[0].wait(10) == -signal.SIGKILL


def test_a_keeper_left_in_the_scopes_own_group_is_moved_into_the_leaf(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent killed between systemd-run and the move leaves the keeper in the scope's root:
    the next start moves it, or the scope's controllers stay refused at every start."""
    group = tmp_path / "v2" / "tcluster.slice" / "tcl-tasks-n1.scope"
    group.mkdir(parents=True)
    (group / "cgroup.procs").write_text("4242\n")
    (group / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    moved: list[tuple[Path, str]] = []

    def move(path: Path, value: str) -> None:
        moved.append((path, value))
        path.write_text(value + "\n")
        (group / "cgroup.procs").write_text("")
    monkeypatch.setattr(taskscope, "write_file", move)
    monkeypatch.setattr(taskscope.shutil, "which", lambda name: f"/usr/bin/{name}")
    spawned: list[list[str]] = []
    scope = TaskScope(tmp_path / "v2", "n1", spawn=lambda args, **_: spawned.append(args))  # type: ignore[arg-type,func-returns-value]
    assert scope.ensure() == "adopted" and spawned == []
    assert moved == [(group / "keeper" / "cgroup.procs", "4242")]
