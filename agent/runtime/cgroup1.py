"""The cgroup v1 backend: one group per task in each of the cpu, cpuacct, memory, pids and
freezer hierarchies (<root>/<subtree>/<key>). The freezer is there for teardown (HOST.md):
freeze, SIGKILL everything, thaw, wait until no process is listed, rmdir (again on EBUSY)."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Callable

from .base import LaunchError, RawUsage, RuntimeSetupError, TaskSpec
from .cgfs import (closable, is_safe_name, kill_all, make_chain, read_pids, read_text,
                   remove_if_empty, rmdir_cgroup, signal_pids, wait_until)
from .counterfiles import CounterFiles
from .detect import CgroupMounts
from .devices import v1_device_limits
from .limits import v1_limits
from .shimbase import ShimRuntime
from .cgroup_usage import V1_FILES, oom_kills_v1, usage_v1
from .writer import write_file, write_v1

CLK_TCK = os.sysconf("SC_CLK_TCK")
TASK_CONTROLLERS = ("cpu", "cpuacct", "memory", "pids", "freezer")
OPTIONAL_CONTROLLERS = ("blkio", "devices")   # I/O weight and bytes; device rules (GPU nodes)
KILL_TIMEOUT_S = 5.0


def _unique(dirs: dict[str, Path]) -> list[Path]:
    """Co-mounted controllers (cpu,cpuacct) share one directory: act on it once."""
    return list(dict.fromkeys(dirs.values()))


def _freezer(state_file: Path) -> Callable[[bool], None]:
    def freeze(on: bool) -> None:
        try:
            write_file(state_file, "FROZEN" if on else "THAWED")
        except OSError:
            return       # the group is gone: nothing left to freeze
        if on:           # FREEZING until every task has stopped; bounded, kill anyway after
            wait_until(lambda: (read_text(state_file) or "FROZEN").strip() == "FROZEN", 1.0)
    return freeze


class Cgroup1Runtime(ShimRuntime):
    name = "cgroup1"

    def __init__(self, subtree: str, state_dir: Path, mounts: CgroupMounts, namespaces: bool = True) -> None:
        super().__init__(state_dir, namespaces)
        self._subtree = subtree.strip("/")
        self._roots = {c: Path(p) for c in TASK_CONTROLLERS + OPTIONAL_CONTROLLERS if (p := mounts.v1_path(c))}
        for optional in OPTIONAL_CONTROLLERS:   # without blkio: no I/O weight or bytes
            if optional in self._roots and not os.access(self._roots[optional], os.W_OK):
                del self._roots[optional]
        self._created: list[Path] = []
        self._paths: dict[str, list[tuple[str, str]]] = {}     # per container: files sample() reads
        self._counters = CounterFiles()                        # ... kept open between samples

    def _dirs(self, key: str | None = None) -> dict[str, Path]:
        rel = self._subtree if key is None else f"{self._subtree}/{key}"
        return {c: root / rel for c, root in self._roots.items()}

    def check(self) -> None:
        """Can this host run the backend? No side effects."""
        missing = [c for c in TASK_CONTROLLERS if c not in self._roots]
        if missing:
            raise RuntimeSetupError(f"cgroup v1: no hierarchy mounted for {', '.join(missing)}; mount "
                                    "them (e.g. `mount -t cgroup -o memory cgroup /sys/fs/cgroup/memory`)")
        if not all(is_safe_name(p) for p in self._subtree.split("/")):
            raise RuntimeSetupError(f"cgroup parent {self._subtree!r}: each part must use only A-Za-z0-9_.-")
        for root in _unique(self._roots):
            if not os.access(root, os.W_OK):
                raise RuntimeSetupError(f"cgroup v1: cannot write {root}; run the agent as root")

    def setup(self) -> None:
        self.check()
        for root in _unique(self._roots):
            try:
                made = make_chain(root, self._subtree)
            except OSError as e:
                raise RuntimeSetupError(f"cannot create cgroup {root / self._subtree}: {e.strerror}") from e
            self._created += [p for p in made if p not in self._created]
        self.setup_shim()

    def _prepare(self, spec: TaskSpec) -> list[str]:
        dirs = self._task_dirs(spec)
        made: list[Path] = []
        try:
            for d in _unique(dirs):
                d.mkdir()
                made.append(d)
            memsw = (dirs["memory"] / "memory.memsw.limit_in_bytes").exists()
            limits = v1_limits(spec, memsw=memsw, blkio=self._blkio_weight_file(dirs))
            write_v1(dirs, limits + (v1_device_limits(spec.devices) if spec.devices is not None else []))
        except (OSError, LaunchError) as e:
            remove_if_empty(made[::-1])      # only what we made: an existing group is not ours
            if isinstance(e, FileExistsError):
                raise LaunchError(f"container {spec.key} already exists ({e.filename})") from e
            if isinstance(e, OSError):
                raise LaunchError(f"cannot create the task's cgroups: {e}") from e
            raise
        # `tasks` with "0": the shim's single-threaded child moves itself, which the kernel does
        # without the cgroup_threadgroup_rwsem write lock that `cgroup.procs` takes (its RCU
        # grace period was most of a start: bench/start_latency.py --entry-compare).
        return [str(d / "tasks") for d in _unique(dirs)]

    def _task_dirs(self, spec: TaskSpec) -> dict[str, Path]:
        """The task's groups: a devices group only when its device access is confined."""
        dirs = self._dirs(spec.key)
        if spec.devices is None:
            dirs.pop("devices", None)
        elif "devices" not in dirs:
            raise LaunchError("the task's device access must be confined (this node offers GPUs) and no "
                              "writable cgroup v1 devices hierarchy is mounted")
        return dirs

    def _is_empty(self, dirs: dict[str, Path]) -> bool:
        # Empty once no hierarchy lists a process. Not pids.current: it still counts
        # zombies until their parent reaps them (for orphans that is init, measured ~1 s
        # late on this host), and zombies do not stop rmdir.
        return all(not read_pids(d / "cgroup.procs") for d in _unique(dirs))

    @staticmethod
    def _blkio_weight_file(dirs: dict[str, Path]) -> str:
        for name in ("blkio.weight", "blkio.bfq.weight"):
            if "blkio" in dirs and (dirs["blkio"] / name).exists():
                return name
        return ""

    def _kill_all(self, key: str, timeout: float = KILL_TIMEOUT_S) -> None:
        """Freeze, SIGKILL everything listed, thaw, until no hierarchy lists a process."""
        dirs = self._dirs(key)
        present = [d for d in _unique(dirs) if d.is_dir()]
        if not present:
            return
        freezer = dirs["freezer"]
        freeze = _freezer(freezer / "freezer.state") if freezer.is_dir() else None
        procs = (freezer if freezer.is_dir() else present[0]) / "cgroup.procs"
        kill_all(procs, lambda: self._is_empty(dirs), freeze, timeout)

    def _destroy(self, key: str) -> None:
        dirs = self._dirs(key)
        self._forget(key)
        present = [d for d in _unique(dirs) if d.is_dir()]
        if not present:
            return
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while True:
            self._kill_all(key, max(0.1, deadline - time.monotonic()))
            try:
                for d in present:
                    rmdir_cgroup(d, timeout=0.2)
                return
            except OSError as e:
                # EBUSY: a process was still on its way out; kill again, bounded.
                if e.errno != errno.EBUSY or time.monotonic() >= deadline:
                    raise

    def _oom_kills(self, key: str) -> int:
        return oom_kills_v1(read_text(self._dirs(key)["memory"] / "memory.oom_control") or "")

    def _forget(self, key: str) -> None:
        self._paths.pop(key, None)
        self._counters.forget(key)

    def _sample_paths(self, key: str) -> list[tuple[str, str]]:
        paths = self._paths.get(key)
        if paths is None:
            dirs = self._dirs(key)
            # An optional hierarchy this host lacks is simply not read.
            paths = [(name, str(dirs[c] / name)) for c, name in V1_FILES if c in dirs]
            self._paths[key] = paths
        return paths

    def sample(self, key: str) -> RawUsage | None:
        if not is_safe_name(key):
            return None
        files = self._counters.read(key, self._sample_paths(key))
        if "cpuacct.usage" not in files:
            self._forget(key)
            return None          # the container no longer exists
        return usage_v1(files, time.time(), CLK_TCK, time.monotonic())

    def _signal_each(self, key: str, signum: int) -> None:
        signal_pids(read_pids(self._dirs(key)["pids"] / "cgroup.procs"), signum)

    def containers(self) -> list[str]:
        keys: set[str] = set()
        for node in _unique(self._dirs()):
            if node.is_dir():
                keys.update(p.name for p in node.iterdir() if p.is_dir() and is_safe_name(p.name))
        return sorted(keys)

    def close(self) -> None:
        """Remove the node's groups if empty: tasks left running survive an agent restart
        (they are re-adopted), and other agents may share the parents."""
        self._counters.close()
        for root in _unique(self._roots):
            created = [p for p in self._created if root in p.parents]
            remove_if_empty(closable(root, self._subtree, root / self._subtree, created))
