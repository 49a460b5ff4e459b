"""Which cgroup hierarchies this host has, and which backend to use.

Pure: the caller reads /proc/self/mountinfo and the v2 root's cgroup.controllers; here is
only text in, values out, so every host layout (hybrid, pure v2, co-mounted v1, none) is
tested with canned text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from .base import RuntimeSetupError
from .taskscope import TASKS, scope_group

Mode = Literal["cgroup2", "cgroup1"]

# Super options of a v1 cgroup mount mix controllers with flags ("rw", "noprefix",
# "name=systemd", "release_agent=..."); a whitelist of controller names is unambiguous.
V1_CONTROLLERS = frozenset({
    "blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "hugetlb", "memory", "misc",
    "net_cls", "net_prio", "perf_event", "pids", "rdma",
})
# The freezer is required as well: it is what makes v1 teardown reliable (HOST.md).
V1_REQUIRED = ("cpu", "cpuacct", "memory", "pids", "freezer")
V2_REQUIRED = ("cpu", "memory", "pids")
V2_OPTIONAL = ("io",)         # enabled where the host offers it: io.weight and io.stat

_OCTAL = re.compile(r"\\([0-7]{3})")

_V2_FIX = ("boot with systemd.unified_cgroup_hierarchy=1 (pure cgroup v2), or, without "
           "systemd, `mount -t cgroup2 none /sys/fs/cgroup` with no v1 hierarchy bound to "
           "cpu, memory or pids")
_V1_FIX = ("mount each, e.g. `mount -t cgroup -o memory cgroup /sys/fs/cgroup/memory`, or "
           "boot with systemd.unified_cgroup_hierarchy=0")
_PROCESS_HINT = "(for development only: --runtime process runs tasks without isolation)"


@dataclass(frozen=True)
class CgroupMounts:
    v2: str | None = None                     # mount point of the cgroup2 filesystem
    v1: tuple[tuple[str, str], ...] = ()      # (controller, mount point), sorted

    def v1_path(self, controller: str) -> str | None:
        return dict(self.v1).get(controller)


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def _parse_line(line: str) -> tuple[str, str, str] | None:
    """(fstype, mount point, super options) of one mountinfo line, None if malformed."""
    fields = line.split()
    # Optional fields (shared:N, master:N) sit between field 6 and the "-" separator.
    try:
        sep = fields.index("-", 6)
    except ValueError:
        return None
    if len(fields) < sep + 3:
        return None
    super_opts = fields[sep + 3] if len(fields) > sep + 3 else ""
    return fields[sep + 1], _unescape(fields[4]), super_opts


def parse_mountinfo(text: str) -> CgroupMounts:
    v2: str | None = None
    v1: dict[str, str] = {}
    for line in text.splitlines():
        parsed = _parse_line(line)
        if parsed is None:
            continue
        fstype, mount_point, super_opts = parsed
        if fstype == "cgroup2" and v2 is None:
            v2 = mount_point
        elif fstype == "cgroup":
            for opt in super_opts.split(","):
                # First mount wins: later ones are usually bind mounts of the same hierarchy.
                if opt in V1_CONTROLLERS and opt not in v1:
                    v1[opt] = mount_point
    return CgroupMounts(v2=v2, v1=tuple(sorted(v1.items())))


def parse_controllers(text: str) -> set[str]:
    """The words of a cgroup.controllers / cgroup.subtree_control file."""
    return set(text.split())


def v2_missing(mounts: CgroupMounts, v2_controllers: set[str]) -> list[str]:
    if mounts.v2 is None:
        return list(V2_REQUIRED)
    return [c for c in V2_REQUIRED if c not in v2_controllers]


def v1_missing(mounts: CgroupMounts) -> list[str]:
    return [c for c in V1_REQUIRED if mounts.v1_path(c) is None]


def _v2_problem(mounts: CgroupMounts, missing: list[str]) -> str:
    if mounts.v2 is None:
        return f"cgroup v2: no cgroup2 filesystem is mounted; fix: {_V2_FIX}"
    return (f"cgroup v2: the cgroup2 mount at {mounts.v2} lacks the {', '.join(missing)} "
            f"controller(s) (on a hybrid host they are bound to v1 hierarchies); fix: {_V2_FIX}")


def _v1_problem(missing: list[str]) -> str:
    return f"cgroup v1: no hierarchy is mounted for {', '.join(missing)}; fix: {_V1_FIX}"


def choose_mode(mounts: CgroupMounts, v2_controllers: set[str], requested: str = "auto") -> Mode:
    """cgroup2 when its mount offers cpu, memory and pids; else cgroup1 when v1 hierarchies
    for cpu, cpuacct, memory, pids and freezer exist; else RuntimeSetupError."""
    if requested not in ("auto", "cgroup2", "cgroup1"):
        raise RuntimeSetupError(f"unknown cgroup mode {requested!r}; use auto, cgroup2 or cgroup1")
    miss2 = v2_missing(mounts, v2_controllers)
    miss1 = v1_missing(mounts)
    if requested in ("auto", "cgroup2") and not miss2:
        return "cgroup2"
    if requested in ("auto", "cgroup1") and not miss1:
        return "cgroup1"
    problems = []
    if requested in ("auto", "cgroup2"):
        problems.append(_v2_problem(mounts, miss2))
    if requested in ("auto", "cgroup1"):
        problems.append(_v1_problem(miss1))
    if requested == "cgroup2" and not miss1:
        problems.append("cgroup v1 would work here: use --runtime cgroup1 or auto")
    if requested == "cgroup1" and not miss2:
        problems.append("cgroup v2 would work here: use --runtime cgroup2 or auto")
    return _raise(requested, problems)


def _raise(requested: str, problems: list[str]) -> Mode:
    what = "no cgroup backend works on this host" if requested == "auto" else f"{requested} is not usable"
    raise RuntimeSetupError(f"{what}: " + "; ".join(problems) + f" {_PROCESS_HINT}")


def parse_proc_cgroup(text: str) -> str | None:
    """The process's cgroup v2 path from /proc/<pid>/cgroup (the `0::/path` line)."""
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "" and path.startswith("/"):
            return path
    return None


@dataclass(frozen=True)
class V2Layout:
    subtree: str                  # task groups go to <mount>/<subtree>/<key>
    agent_leaf: str | None = None  # delegated: where the agent moves itself first


DELEGATED = "delegated"
SCOPE = "scope"


def default_parent(own_is_delegated_service: bool, systemd_run: bool, legacy_tasks: bool) -> str | None:
    """What no --cgroup-parent means on a cgroup v2 host: the delegated scope
    (agent/runtime/taskscope.py) when the agent runs as a Delegate=yes service and systemd-run
    is there; else None, the agent's own top-level tree tcluster/<node> (no systemd, or the
    agent started by hand). An agent upgraded from a version that used tcluster/<node> keeps
    it while tasks started there still run, so that it re-adopts them."""
    if own_is_delegated_service and systemd_run and not legacy_tasks:
        return SCOPE
    return None


def plan_v2(node: str, cgroup_parent: str | None, own_cgroup: str | None) -> V2Layout:
    """Where this agent's groups live on a v2 host.

    - None: tcluster/<node>, a top-level tree of the agent's own (like Nomad's
      nomad.slice), for an agent not run as a systemd service (default_parent).
    - `--cgroup-parent delegated`: the agent's own (delegated) group: tasks in <own>/tasks,
      the agent itself moved into the leaf <own>/agent, as cgroup v2 requires. Not the
      default because systemd before v254 (no DelegateSubgroup=) then cannot restart the
      unit while tasks run: it must put the new main process into the unit's group, which
      has controllers enabled, and fails with 219/CGROUP (measured in tests/vm).
    - `--cgroup-parent scope` (the default under systemd, default_parent): a transient
      delegated scope, tcluster.slice/tcl-tasks-<node>.scope: tasks in <scope>/tasks.
    - any other value: that path under the cgroup2 mount."""
    if cgroup_parent == SCOPE:
        return V2Layout(f"{scope_group(node)}/{TASKS}")
    if cgroup_parent == DELEGATED:
        own = (own_cgroup or "/").strip("/")
        if not own:
            raise RuntimeSetupError("--cgroup-parent delegated: the agent runs in the root cgroup, "
                                    "which is not delegated to it; run it as a unit with Delegate=yes")
        if own.rsplit("/", 1)[-1] == "agent" and "/" in own:
            own = own.rsplit("/", 1)[0]          # restarted inside our own leaf already
        return V2Layout(f"{own}/tasks", f"{own}/agent")
    if cgroup_parent is not None:
        return V2Layout(cgroup_parent.strip("/"))
    return V2Layout(f"tcluster/{node}")
