"""make_runtime: names, modes and the dev-mode fallback (host mounts canned)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tcluster.agent.runtime as runtime_pkg
from tcluster.agent.runtime import (Cgroup1Runtime, Cgroup2Runtime, ProcessRuntime, RuntimeSetupError,
                                    make_runtime)
from tcluster.agent.runtime.detect import CgroupMounts

NO_CGROUPS = (CgroupMounts(), set[str]())


@pytest.mark.parametrize("node", ["a/b", "..", "", "node 1", "x;rm"])
def test_unsafe_node_names_are_refused(node: str, tmp_path: Path) -> None:
    with pytest.raises(RuntimeSetupError, match="node name"):
        make_runtime("process", node, tmp_path)


@pytest.mark.parametrize("parent", ["../escape", "a//b/..", "a b/c"])
def test_unsafe_cgroup_parents_are_refused(parent: str, tmp_path: Path) -> None:
    with pytest.raises(RuntimeSetupError, match="cgroup parent"):
        make_runtime("process", "n1", tmp_path, cgroup_parent=parent)


def test_unknown_mode(tmp_path: Path) -> None:
    with pytest.raises(RuntimeSetupError, match="unknown runtime 'docker2'"):
        make_runtime("docker2", "n1", tmp_path)


def test_process_mode_needs_no_cgroups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_pkg, "host_mounts", lambda: NO_CGROUPS)
    assert isinstance(make_runtime("process", "n1", tmp_path), ProcessRuntime)


def test_auto_falls_back_to_process_only_in_dev_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_pkg, "host_mounts", lambda: NO_CGROUPS)
    assert isinstance(make_runtime("auto", "n1", tmp_path, allow_process=True), ProcessRuntime)
    with pytest.raises(RuntimeSetupError, match="no cgroup backend works"):
        make_runtime("auto", "n1", tmp_path)
    with pytest.raises(RuntimeSetupError, match="cgroup1 is not usable"):
        make_runtime("cgroup1", "n1", tmp_path, allow_process=True)   # explicit modes never fall back


def test_chosen_backend_and_subtree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v1 = CgroupMounts(v1=tuple((c, str(tmp_path)) for c in ("cpu", "cpuacct", "freezer", "memory", "pids")))
    monkeypatch.setattr(runtime_pkg, "host_mounts", lambda: (v1, set[str]()))
    rt = make_runtime("auto", "n1", tmp_path)
    assert isinstance(rt, Cgroup1Runtime) and rt._subtree == "tcluster/n1"
    v2_root = tmp_path / "v2"
    v2_root.mkdir()
    (v2_root / "cgroup.controllers").write_text("cpu io memory pids\n")
    v2 = CgroupMounts(v2=str(v2_root))
    monkeypatch.setattr(runtime_pkg, "host_mounts", lambda: (v2, {"cpu", "io", "memory", "pids"}))
    rt2 = make_runtime("auto", "n1", tmp_path, cgroup_parent="/agent.slice/tasks/")
    assert isinstance(rt2, Cgroup2Runtime) and rt2._subtree == "agent.slice/tasks"
