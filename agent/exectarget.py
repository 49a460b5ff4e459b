"""What `tcl exec` needs to join a running task: read from the spec its shim was started
with (the container's state directory, 0700): the cgroup.procs files it entered, its
namespaces' owner (the task's first process), user, groups, working directory and
environment. One source for both: an exec sees exactly what the task was given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    if docker is not None and getattr(runtime, "_owner", {}).get(key) is docker:
        raise ExecRefused("exec into a task that runs an image (docker) is not supported yet")
    if not isinstance(native, ShimRuntime):
        raise ExecRefused(f"the node's runtime ({getattr(runtime, 'name', '?')}) cannot exec into tasks")
    cdir: Path = native.container_dir(key)
    try:
        pairs = parse_shim_spec((cdir / SPEC_FILE).read_bytes())
        task_pid = int((cdir / TASK_PID_FILE).read_text())
    except (OSError, ValueError):
        raise ExecRefused(f"task {key} has no running container on this node") from None
    return target_of(pairs, task_pid)
