"""What `tcl exec` needs to join a running task: read from the spec its shim was started
with (the container's state directory, 0700): the cgroup.procs files it entered, its
namespaces' owner (the task's first process), user, groups, working directory and
environment. One source for both: an exec sees exactly what the task was given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .runtime.dockerspec import cgroup_roots
from .runtime.shimbase import SPEC_FILE, TASK_PID_FILE, ShimRuntime


class ExecRefused(Exception):
    """This node cannot exec into that task; the message says why."""


def parse_shim_spec(data: bytes) -> list[tuple[str, str]]:
    """shim.c's format: NUL-separated key, value, key, value ..."""
    parts = data.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [(parts[i].decode(errors="replace"), parts[i + 1].decode(errors="replace"))
            for i in range(0, len(parts) - 1, 2)]


def target_of(pairs: list[tuple[str, str]], task_pid: int) -> dict[str, Any]:
    """The helper's spec (agent/execjoin.py) less the command, from the shim's pairs."""
    env: dict[str, str] = {}
    target: dict[str, Any] = {"procs": [], "groups": [], "task_pid": task_pid, "ns": False, "cwd": "/"}
    for key, value in pairs:
        if key == "env":
            name, _, val = value.partition("=")
            env[name] = val
        elif key == "procs":
            target["procs"].append(value)
        elif key == "group":
            target["groups"].append(int(value))
        elif key in ("uid", "gid"):
            target[key] = int(value)
        elif key == "ns":
            target["ns"] = value == "1"
        elif key == "cwd":
            target["cwd"] = value
    target["env"] = env
    return target


def exec_target(runtime: object, key: str) -> dict[str, Any]:
    """ExecRefused when the task's container is not one this agent can join."""
    native = getattr(runtime, "native", runtime)
    docker = getattr(runtime, "docker", None)
    owner = getattr(runtime, "_owner", {}).get(key)
    if docker is not None and owner is None:        # adopted after an agent restart
        owner = docker if key in docker.containers() else native
    if docker is not None and owner is docker:
        return docker_target(docker, key)
    if not isinstance(native, ShimRuntime):
        raise ExecRefused(f"the node's runtime ({getattr(runtime, 'name', '?')}) cannot exec into tasks")
    cdir: Path = native.container_dir(key)
    try:
        pairs = parse_shim_spec((cdir / SPEC_FILE).read_bytes())
        task_pid = int((cdir / TASK_PID_FILE).read_text())
    except (OSError, ValueError):
        raise ExecRefused(f"task {key} has no running container on this node") from None
    return target_of(pairs, task_pid)


def docker_target(docker: Any, key: str) -> dict[str, Any]:
    """What `docker exec` would give, read from the engine's record of the container: its
    init's namespaces, its cgroups (under the agent's tree), the user, groups, working
    directory and environment (the image's merged with the task's) it was created with."""
    try:
        info = docker._find(key)
    except Exception as error:          # the engine's client raises its own kinds
        raise ExecRefused(f"cannot ask the docker engine about task {key}: {error}") from None
    state = (info or {}).get("State") or {}
    if not state.get("Running") or int(state.get("Pid") or 0) <= 0:
        raise ExecRefused(f"task {key} has no running container on this node")
    assert info is not None
    # Every hierarchy the container is in (named and hybrid cgroup2 ones too), as runc puts it.
    groups = (root / docker.parent / info["Id"] for root in cgroup_roots())
    return container_target(info, [str(g / "cgroup.procs") for g in groups if (g / "cgroup.procs").exists()])


def container_target(info: dict[str, Any], procs: list[str]) -> dict[str, Any]:
    """The helper's spec from a container's inspect record. Pure."""
    config = info.get("Config") or {}
    uid, _, gid = str(config.get("User") or "0:0").partition(":")
    env: dict[str, str] = {}
    for item in config.get("Env") or []:
        name, _, value = str(item).partition("=")
        env[name] = value
    groups = [int(g) for g in (info.get("HostConfig") or {}).get("GroupAdd") or [] if str(g).isdigit()]
    return {"procs": sorted(set(procs)), "groups": groups, "task_pid": int(info["State"]["Pid"]), "ns": True,
            "cwd": config.get("WorkingDir") or "/", "uid": int(uid), "gid": int(gid or uid), "env": env}
