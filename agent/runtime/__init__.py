"""Runtime backends and the factory that picks one for this host."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from .base import (ExitStatus, LaunchError, RawUsage, Runtime, RuntimeSetupError, Started,
                   TaskSpec)
from .cgfs import is_safe_name, read_text
from .cgroup1 import Cgroup1Runtime
from .cgroup2 import Cgroup2Runtime
from .detect import CgroupMounts, choose_mode, parse_controllers, parse_mountinfo, parse_proc_cgroup, plan_v2
from .detect import DELEGATED, SCOPE, default_parent
from .taskscope import TaskScope
from .process import ProcessRuntime

if TYPE_CHECKING:                # imported when used: pyroute2 and the docker SDK load slowly
    from .node import NodeRuntime

__all__ = ["Cgroup1Runtime", "Cgroup2Runtime", "ExitStatus", "LaunchError", "ProcessRuntime",
           "RawUsage", "Runtime", "RuntimeSetupError", "Started", "TaskSpec", "make_runtime",
           "make_node_runtime", "host_mounts"]

log = logging.getLogger(__name__)
MODES = ("auto", "cgroup2", "cgroup1", "process")


def host_mounts(mountinfo: str = "/proc/self/mountinfo") -> tuple[CgroupMounts, set[str]]:
    """The cgroup mounts of this host and the controllers its cgroup2 root offers."""
    mounts = parse_mountinfo(Path(mountinfo).read_text())
    controllers: set[str] = set()
    if mounts.v2 is not None:
        try:
            controllers = parse_controllers((Path(mounts.v2) / "cgroup.controllers").read_text())
        except OSError:
            pass
    return mounts, controllers


def own_cgroup_v2(proc_cgroup: str = "/proc/self/cgroup") -> str | None:
    try:
        return parse_proc_cgroup(Path(proc_cgroup).read_text())
    except OSError:
        return None


def is_delegated(v2_mount: str, own: str | None) -> bool:
    """systemd (>= 251) marks a Delegate=yes unit's group with a `delegate` xattr. Checked
    on the parent too, for an agent restarted inside its own leaf."""
    if not own or own == "/":
        return False
    for path in (own, own.rsplit("/", 1)[0] if own.endswith("/agent") else None):
        if not path:
            continue
        try:
            names = os.listxattr(Path(v2_mount) / path.lstrip("/"))
        except OSError:
            continue
        if "trusted.delegate" in names or "user.delegate" in names:
            return True
    return False


def _is_delegated_service(v2_mount: str, own: str | None) -> bool:
    """The agent runs as a systemd service with Delegate=yes (tcl-agent.service)."""
    return own is not None and own.rstrip("/").endswith(".service") and is_delegated(v2_mount, own)


def _has_task_groups(tree: Path) -> bool:
    """Tasks an earlier agent started in tcluster/<node> still run there (an empty group a
    killed agent left does not count)."""
    try:
        return any(p.is_dir() and "populated 1" in (read_text(p / "cgroup.events") or "") for p in tree.iterdir())
    except OSError:
        return False


def _subtree(node: str, cgroup_parent: str | None) -> str:
    if not is_safe_name(node):
        raise RuntimeSetupError(f"node name {node!r} cannot name a cgroup: use only A-Za-z0-9_.-")
    if cgroup_parent in (DELEGATED, SCOPE):
        return f"tcluster/{node}"        # v1 has no delegation: the default tree
    subtree = f"tcluster/{node}" if cgroup_parent is None else cgroup_parent.strip("/")
    if not subtree or not all(is_safe_name(p) for p in subtree.split("/")):
        raise RuntimeSetupError(f"cgroup parent {cgroup_parent!r} must be a relative path whose "
                                "parts use only A-Za-z0-9_.-")
    return subtree


def _cgroup2(node: str, subtree: str, cgroup_parent: str | None, state_dir: Path, mounts: CgroupMounts,
             namespaces: bool) -> Cgroup2Runtime:
    assert mounts.v2 is not None
    own = own_cgroup_v2()
    if cgroup_parent is None:
        service, legacy = _is_delegated_service(mounts.v2, own), _has_task_groups(Path(mounts.v2) / subtree)
        cgroup_parent = default_parent(service, shutil.which("systemd-run") is not None, legacy)
        if service and legacy:
            log.info("tasks an earlier agent started still run in %s: staying there; the delegated scope "
                     "comes at the first start once they have ended", subtree)
    if cgroup_parent == SCOPE:
        layout = plan_v2(node, SCOPE, own)
        return Cgroup2Runtime(layout.subtree, state_dir, mounts, None, namespaces, TaskScope(Path(mounts.v2), node))
    if cgroup_parent != DELEGATED:
        return Cgroup2Runtime(subtree, state_dir, mounts, None, namespaces)
    layout = plan_v2(node, cgroup_parent, own)
    if not is_delegated(mounts.v2, own):
        log.warning("cgroup %s carries no delegate mark: is the unit's Delegate=yes set?", own)
    return Cgroup2Runtime(layout.subtree, state_dir, mounts, layout.agent_leaf, namespaces)


def make_runtime(mode: str, node: str, state_dir: Path, cgroup_parent: str | None = None,
                 allow_process: bool = False, namespaces: bool = True) -> Runtime:
    """The backend for `mode` (auto|cgroup2|cgroup1|process), not yet set up. `auto` falls
    back to the process backend only with allow_process (dev mode) when no cgroup backend
    can work here."""
    if mode not in MODES:
        raise RuntimeSetupError(f"unknown runtime {mode!r}; use one of {', '.join(MODES)}")
    subtree = _subtree(node, cgroup_parent)
    if mode == "process":
        return ProcessRuntime(state_dir)
    try:
        mounts, controllers = host_mounts()
        chosen = choose_mode(mounts, controllers, mode)
        runtime: Cgroup1Runtime | Cgroup2Runtime
        if chosen == "cgroup2":
            runtime = _cgroup2(node, subtree, cgroup_parent, state_dir, mounts, namespaces)
        else:
            runtime = Cgroup1Runtime(subtree, state_dir, mounts, namespaces)
        runtime.check()
        return runtime
    except (RuntimeSetupError, OSError) as e:
        if mode == "auto" and allow_process:
            log.warning("!!! no cgroup backend works here (%s); dev mode: falling back to the "
                        "process runtime: NO ISOLATION !!!", e)
            return ProcessRuntime(state_dir)
        if isinstance(e, OSError):
            raise RuntimeSetupError(f"cannot read the cgroup mounts: {e}") from e
        raise


def make_node_runtime(native: Runtime, node: str, state_dir: Path, docker_host: str | None = None,
                      net: bool = False, net_subnet: str = "10.88.0.0/24", masquerade: bool = False) -> NodeRuntime:
    """The agent's runtime: `native` (from make_runtime) plus, with `docker_host`, a docker
    backend for tasks with an image, and, with `net`, per-task network namespaces (modes
    none and bridge) on the subnet `net_subnet`. Not yet set up: its setup() sets up the
    native backend (errors are fatal), then docker (an error only disables images; the
    reason is in .docker_problem), then the networks."""
    from .node import NodeRuntime
    docker = None
    if docker_host:
        from .docker import DockerRuntime
        mode = native.name if native.name in ("cgroup1", "cgroup2") else None
        try:
            mounts, controllers = host_mounts()
            mode = mode or choose_mode(mounts, controllers)
            docker = DockerRuntime(node, mounts, mode, docker_host, fence_dir=state_dir / "docker-fence")
        except (OSError, RuntimeSetupError) as e:
            log.warning("docker backend off: no cgroup hierarchy to place containers in (%s)", e)
    nets = None
    if net:
        from .tasknet import TaskNetworks
        nets = TaskNetworks(node, state_dir, net_subnet, masquerade)
    runtime = NodeRuntime(native, docker, nets)
    if docker_host and docker is None:
        runtime.docker_problem = "no cgroup hierarchy to place containers in"
    return runtime
