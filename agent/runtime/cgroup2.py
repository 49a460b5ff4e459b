"""The cgroup v2 backend: one group per task at <mount>/<subtree>/<key>, with the cpu,
memory and pids controllers (and io where the host has it) enabled down the subtree.

Under systemd the subtree is <scope>/tasks in the agent's delegated scope (taskscope.py),
made before the tree. With --cgroup-parent delegated it is <own cgroup>/tasks and the agent
first moves itself into the leaf <own cgroup>/agent: cgroup v2 allows controllers to be
enabled only in groups without processes of their own.
Teardown writes cgroup.kill (kernel >= 5.14) or, before that, freezes and kills in a loop."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path
from typing import Callable

from .base import LaunchError, RawUsage, RuntimeSetupError, TaskSpec
from .cgfs import (closable, is_safe_name, kill_all, make_chain, parse_flat_keyed, read_pids,
                   read_text, remove_if_empty, rmdir_cgroup, signal_pids, wait_until)
from .counterfiles import CounterFiles
from .detect import V2_OPTIONAL, V2_REQUIRED, CgroupMounts, parse_controllers
from . import devbpf
from .limits import v2_limits
from .shimbase import ShimRuntime
from .taskscope import TaskScope
from .cgroup_usage import V2_FILES, oom_kills_v2, usage_v2
from .writer import write_file, write_v2

KILL_TIMEOUT_S = 5.0
_ENABLE_HINTS = {
    errno.EBUSY: "the group holds processes (cgroup v2 allows controllers only above leaf "
                 "groups): run the agent in a leaf of a delegated subtree, e.g. Delegate=yes",
    errno.EACCES: "permission denied: run as root, or delegate the subtree to the agent",
    errno.EPERM: "not permitted: run as root, or delegate the subtree to the agent",
    errno.ENOENT: "the controller is not available in the parent (not delegated)",
}


def _new_cgroup(path: Path) -> None:
    """mkdir in cgroupfs (the kernel fills in the interface files). A seam for tests."""
    path.mkdir()


def _remove_cgroup(path: Path) -> None:
    rmdir_cgroup(path)


class Cgroup2Runtime(ShimRuntime):
    name = "cgroup2"

    def __init__(self, subtree: str, state_dir: Path, mounts: CgroupMounts, agent_leaf: str | None = None,
                 namespaces: bool = True, scope: TaskScope | None = None) -> None:
        super().__init__(state_dir, namespaces)
        if mounts.v2 is None:
            raise RuntimeSetupError("cgroup v2: no cgroup2 filesystem is mounted")
        self._root = Path(mounts.v2)
        self._subtree = subtree.strip("/")
        self._node = self._root / self._subtree
        self._leaf = agent_leaf.strip("/") if agent_leaf else None
        # Where our part of the tree hangs: the delegated group, or the mount's root.
        self._base = (self._root / self._leaf).parent if self._leaf else self._root
        self._created: list[Path] = []
        self._paths: dict[str, list[tuple[str, str]]] = {}     # per container: files sample() reads
        self._counters = CounterFiles()                        # ... kept open between samples
        self._controllers: tuple[str, ...] = V2_REQUIRED
        self._scope = scope                                    # the delegated scope the tasks live in
        self._tree = threading.Lock()       # launches run in threads: one remakes a stopped scope

    def _dir(self, key: str) -> Path:
        return self._node / key

    def check(self) -> None:
        """Can this host run the backend? No side effects."""
        if not all(is_safe_name(p) for p in self._subtree.split("/")):
            raise RuntimeSetupError(f"cgroup parent {self._subtree!r}: each part must use only A-Za-z0-9_.-")
        text = read_text(self._base / "cgroup.controllers")
        if text is None:
            raise RuntimeSetupError(f"cgroup v2: {self._base} does not exist or is not a cgroup")
        have = parse_controllers(text)
        missing = [c for c in V2_REQUIRED if c not in have]
        if missing:
            fix = ("set Delegate=yes in the agent's systemd unit" if self._leaf else
                   f"enable them in the parent's cgroup.subtree_control, e.g. `echo +{missing[0]} > "
                   f"{self._base.parent}/cgroup.subtree_control`, or boot with cgroup_no_v1=all")
            raise RuntimeSetupError(f"cgroup v2: {self._base} lacks the {', '.join(missing)} controller(s); "
                                    f"fix: {fix}")
        self._controllers = V2_REQUIRED + tuple(c for c in V2_OPTIONAL if c in have)
        if not os.access(self._base, os.W_OK):
            raise RuntimeSetupError(f"cgroup v2: cannot write {self._base}; run the agent as root "
                                    "or delegate the subtree to it")
        if self._scope is not None:
            self._scope.tools()

    def setup(self) -> None:
        self.check()
        if self._leaf:
            self._enter_leaf()
        self._make_tree()
        self.setup_shim()

    def _make_tree(self) -> None:
        """The groups down to the tasks' parent, controllers on in each (the scope first)."""
        with self._tree:
            self._make_tree_locked()

    def _make_tree_locked(self) -> None:
        top = self._base        # systemd enabled the controllers down to a scope: ours starts there
        if self._scope is not None:
            self._scope.ensure()
            top = self._scope.group
        try:
            made = make_chain(top, str(self._node.relative_to(top)), _new_cgroup)
        except OSError as e:
            raise RuntimeSetupError(f"cannot create cgroup {self._node}: {e.strerror}") from e
        self._created += [p for p in made if p not in self._created]
        # Controllers must be on in subtree_control of every group above a task's group.
        path = top
        self._enable(path)
        for part in self._node.relative_to(top).parts:
            path = path / part
            self._enable(path)

    def _enter_leaf(self) -> None:
        """Move the agent (and so the shims it starts) out of the delegated group's root."""
        assert self._leaf is not None
        leaf = self._root / self._leaf
        try:
            make_chain(self._root, self._leaf, _new_cgroup)
            write_file(leaf / "cgroup.procs", str(os.getpid()))
        except OSError as e:
            raise RuntimeSetupError(f"cannot move the agent into its leaf cgroup {leaf}: {e.strerror}") from e

    def _enable(self, group: Path) -> None:
        on = parse_controllers(read_text(group / "cgroup.subtree_control") or "")
        missing = [c for c in self._controllers if c not in on]
        if not missing:
            return
        value = " ".join(f"+{c}" for c in missing)
        try:
            write_file(group / "cgroup.subtree_control", value)
        except OSError as e:
            hint = _ENABLE_HINTS.get(e.errno or 0, e.strerror or str(e))
            raise RuntimeSetupError(f"cannot enable {value} in {group}/cgroup.subtree_control: {hint}") from e

    def _prepare(self, spec: TaskSpec) -> list[str]:
        group = self._dir(spec.key)
        if self._scope is not None and not self._node.is_dir():
            try:             # the scope was stopped (`systemctl stop`): a new one, once
                with self._tree:
                    if not self._node.is_dir():
                        self._make_tree_locked()
            except RuntimeSetupError as e:
                raise LaunchError(str(e)) from e
        try:
            _new_cgroup(group)
        except FileExistsError as e:
            raise LaunchError(f"container {spec.key} already exists ({group})") from e
        except OSError as e:
            raise LaunchError(f"cannot create cgroup {group}: {e.strerror}") from e
        try:
            write_v2(group, v2_limits(spec, swap_file=(group / "memory.swap.max").exists(),
                                      io_file=(group / "io.weight").exists()))
            if spec.devices is not None:
                devbpf.attach(str(group), spec.devices)     # before any task process is in it
        except LaunchError:
            try:
                _remove_cgroup(group)
            except OSError:
                pass          # the launch error is what matters; containers() will show it
            raise
        return [str(group / "cgroup.procs")]

    def _is_empty(self, group: Path) -> bool:
        events = read_text(group / "cgroup.events")
        if events is not None:
            return parse_flat_keyed(events).get("populated", 0) == 0
        return not read_pids(group / "cgroup.procs")

    def _kill_all(self, key: str) -> None:
        group = self._dir(key)
        if not group.is_dir():
            return
        empty: Callable[[], bool] = lambda: self._is_empty(group)  # noqa: E731
        if (group / "cgroup.kill").exists():
            # cgroup.kill kills every process, forks included, in one write.
            deadline = time.monotonic() + KILL_TIMEOUT_S
            while time.monotonic() < deadline:
                try:
                    write_file(group / "cgroup.kill", "1")
                except FileNotFoundError:
                    return                     # removed meanwhile
                if wait_until(empty, 1.0):
                    return
        else:
            kill_all(group / "cgroup.procs", empty, self._freezer(group), KILL_TIMEOUT_S)

    def _destroy(self, key: str) -> None:
        self._forget(key)
        self._kill_all(key)
        if self._dir(key).is_dir():
            _remove_cgroup(self._dir(key))

    @staticmethod
    def _freezer(group: Path) -> Callable[[bool], None] | None:
        if not (group / "cgroup.freeze").exists():
            return None

        def freeze(on: bool) -> None:
            try:
                write_file(group / "cgroup.freeze", "1" if on else "0")
            except OSError:
                return
            if on:
                wait_until(lambda: parse_flat_keyed(read_text(group / "cgroup.events") or "frozen 1")
                           .get("frozen", 1) == 1, 1.0)
        return freeze

    def _oom_kills(self, key: str) -> int:
        return oom_kills_v2(read_text(self._dir(key) / "memory.events") or "")

    def _forget(self, key: str) -> None:
        self._paths.pop(key, None)
        self._counters.forget(key)

    def sample(self, key: str) -> RawUsage | None:
        if not is_safe_name(key):
            return None
        paths = self._paths.get(key)
        if paths is None:
            paths = self._paths[key] = [(name, str(self._dir(key) / name)) for name in V2_FILES]
        files = self._counters.read(key, paths)
        if "cpu.stat" not in files:
            self._forget(key)
            return None          # the container no longer exists
        return usage_v2(files, time.time(), time.monotonic())

    def _signal_each(self, key: str, signum: int) -> None:
        signal_pids(read_pids(self._dir(key) / "cgroup.procs"), signum)

    def containers(self) -> list[str]:
        if not self._node.is_dir():
            return []
        return sorted(p.name for p in self._node.iterdir() if p.is_dir() and is_safe_name(p.name))

    def close(self) -> None:
        """Remove the node group if empty, and the parents we may remove if empty."""
        self._counters.close()
        remove_if_empty(closable(self._root, self._subtree, self._node, self._created))
