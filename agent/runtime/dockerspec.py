"""The docker backend's pure parts: the container's limits and privileges in the engine's
terms, its labels, the exit from the engine's State, and where cgroup hierarchies are
mounted."""

from __future__ import annotations

import io
import os
import tarfile
from datetime import datetime
from pathlib import Path
from typing import Any

from .base import ExitStatus, TaskSpec
from .launch import resolve_user
from tcluster.domain.scripts import SCRIPT_PATH

from .limits import CPU_PERIOD_US, UNLIMITED_SWAP, cpu_quota_us, request_cores, v1_blkio_weight, v1_cpu_shares

LABEL = "tcluster"
LEASE_LABEL = f"{LABEL}.lease"     # the fence lease its watcher reads (dockerfence.py): found again on adoption
# Where a job script lies in an image task's container: copied into the container's own
# layer before it starts (the native shim hands it on a descriptor, SCRIPT_PATH, which a
# container's runtime would not pass on). Hidden at the root, where no workdir puts it.
CONTAINER_SCRIPT_DIR, CONTAINER_SCRIPT_NAME = "/", ".tcl-job-script"


def labels(spec: TaskSpec, node: str) -> dict[str, str]:
    """Who the container is, and where its output goes (read again after a restart)."""
    return {f"{LABEL}.node": node, f"{LABEL}.key": spec.key, f"{LABEL}.task_id": spec.task_id,
            f"{LABEL}.attempt": str(spec.attempt), f"{LABEL}.stdout": spec.stdout_path,
            f"{LABEL}.stderr": spec.stderr_path, f"{LABEL}.log_max_bytes": str(spec.log_max_bytes),
            **({LEASE_LABEL: spec.lease_path} if spec.lease_path else {})}


def container_name(node: str, key: str) -> str:
    return f"tcl.{node}.{key}"


def privileges(uid: int) -> dict[str, Any]:
    """What the task may gain, as create_host_config keywords. No task gains privileges
    by exec (a setuid-root file in the image stays the task's uid, as the native shim's
    PR_SET_NO_NEW_PRIVS does). A task not run as root gets no capability at all: a
    non-root process has none in effect anyway, so emptying the bounding set takes
    nothing it could use (a native non-root task cannot bind ports below 1024 or send
    raw packets either). Root runs only where the operator allowed it (--allow-root, see
    task_user) and keeps the engine's default set."""
    cfg: dict[str, Any] = {"security_opt": ["no-new-privileges"]}
    if uid != 0:
        cfg["cap_drop"] = ["ALL"]
    return cfg


def host_config(spec: TaskSpec, cgroup_parent: str, uid: int) -> dict[str, Any]:
    """The container's limits and privileges (for a task run as `uid`), as
    create_host_config keywords: the native backend's rules (limits.py) in the engine's
    terms. Pure."""
    cpu = request_cores(spec)
    cfg: dict[str, Any] = {"cgroup_parent": cgroup_parent, **privileges(uid),
                           "cpu_shares": v1_cpu_shares(cpu),
                           "pids_limit": spec.pids_max if spec.pids_max > 0 else -1,
                           "blkio_weight": v1_blkio_weight(cpu),
                           "network_mode": "host" if spec.network in ("", "host") else "none",
                           "init": False}
    if spec.cpu_limit > 0:
        cfg.update(cpu_period=CPU_PERIOD_US, cpu_quota=cpu_quota_us(spec.cpu_limit))
    memory = spec.resources.memory
    if memory > 0:
        swap = -1 if spec.swap_bytes == UNLIMITED_SWAP else memory + max(0, spec.swap_bytes)
        cfg.update(mem_limit=memory, memswap_limit=swap)
    cfg.update(gpu_devices(spec))
    if spec.log_max_bytes > 0:
        # The engine's own copy is capped too (it is what a restarted agent copies again).
        cfg["log_config"] = {"type": "json-file", "config": {"max-size": str(spec.log_max_bytes), "max-file": "2"}}
    else:
        cfg["log_config"] = {"type": "json-file", "config": {}}
    return cfg


def gpu_devices(spec: TaskSpec) -> dict[str, Any]:
    """The task's GPUs in the engine's terms: their device nodes (and the shared control
    nodes) added to the container's allow list, and, where NVML found them, a device
    request for the NVIDIA runtime hook by index (it also mounts the driver's libraries)."""
    if not spec.gpus:
        return {}
    cfg: dict[str, Any] = {"devices": [f"{path}:{path}:rwm" for path in spec.gpu_paths]}
    if spec.gpu_driver:
        cfg["device_requests"] = [{"Driver": spec.gpu_driver, "DeviceIDs": [str(i) for i in spec.gpus],
                                   "Capabilities": [["gpu"]]}]
    return cfg


def identity(user: str) -> tuple[int, str, list[str]]:
    """(uid, "uid:gid", supplementary gids) of the task's user as this node knows it: the
    same Unix identity a native task gets, whatever the image's /etc/passwd or USER say.
    "" is the agent's own user, as for a native task (never the image's USER, which is
    often root and would bypass the agent's uid policy)."""
    ident = resolve_user(user)
    if ident is None:
        return os.geteuid(), f"{os.geteuid()}:{os.getegid()}", []
    return ident.uid, f"{ident.uid}:{ident.gid}", [str(g) for g in ident.groups if g != ident.gid]


def parse_time(text: str) -> float:
    """The engine's RFC 3339 times carry nanoseconds, which fromisoformat refuses."""
    if not text or text.startswith("0001-"):
        return 0.0
    head, _, frac = text.rstrip("Z").partition(".")
    frac = "".join(c for c in frac if c.isdigit())[:6]
    stamp = datetime.fromisoformat(f"{head}.{frac or '0'}+00:00")
    return stamp.timestamp()


def exit_from_state(state: dict[str, Any]) -> ExitStatus:
    """ExitStatus from the engine's State. The engine folds a signal into ExitCode as
    128+N (its init is the task itself, so that is how the task died)."""
    code = int(state.get("ExitCode") or 0)
    finished = parse_time(state.get("FinishedAt", ""))
    if state.get("Status") == "created":
        return ExitStatus(None, 0, finished, False, "the container was created but never started "
                                                    "(the agent stopped during its start)")
    oom = bool(state.get("OOMKilled"))
    reason = "OOMKilled" if oom else str(state.get("Error") or "")
    if 128 < code <= 128 + 64:
        return ExitStatus(None, code - 128, finished, oom, reason)
    return ExitStatus(code, 0, finished, oom, reason)


def ready_fd() -> int:
    """An fd that is readable already: for a container that ended before we watched it."""
    return os.eventfd(1, os.EFD_CLOEXEC)


def cgroup_roots(mountinfo: str = "/proc/self/mountinfo") -> list[Path]:
    """Every cgroup hierarchy mounted here, named ones (name=systemd) and a hybrid host's
    cgroup2 too: runc makes the container's group in each, so each is cleaned."""
    roots = []
    for line in Path(mountinfo).read_text().splitlines():
        fields = line.split(" - ", 1)
        if len(fields) == 2 and fields[1].split()[0] in ("cgroup", "cgroup2"):
            roots.append(Path(fields[0].split()[4]))
    return sorted(set(roots))


def container_command(command: tuple[str, ...]) -> list[str]:
    """The task's argv in the container: a script's descriptor path becomes its copy."""
    path = CONTAINER_SCRIPT_DIR + CONTAINER_SCRIPT_NAME
    return [path if word == SCRIPT_PATH else word for word in command]


def script_archive(script: str, uid: int, gid: int) -> bytes:
    """The script as a one-file tar for the engine's put_archive: the task's user owns it,
    read and run only (it is the task's input, as the native shim's descriptor is)."""
    data = script.encode()
    entry = tarfile.TarInfo(CONTAINER_SCRIPT_NAME)
    entry.size, entry.mode, entry.uid, entry.gid = len(data), 0o500, uid, gid
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.addfile(entry, io.BytesIO(data))
    return buffer.getvalue()
