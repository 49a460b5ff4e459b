"""What the master asks an agent to run, and the agent's policy on whom it runs as.

A request is kept as JSON beside the task's logs, so a restarted agent knows what each
container it finds on disk belongs to."""

from __future__ import annotations

import json
import os
import pwd
from dataclasses import asdict, dataclass
from pathlib import Path

from tcluster.agent.runtime.base import LaunchError
from tcluster.resources import Resources

REQUEST_FILE = "launch.json"


@dataclass(frozen=True)
class LaunchRequest:
    task_id: str
    attempt: int
    resources: Resources
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    user: str = ""
    workdir: str = ""
    cpu_limit: float = 0.0
    swap: int = 0            # -1: unlimited
    pids_max: int = 0        # 0: the agent's default

    @property
    def key(self) -> str:
        return f"{self.task_id}.{self.attempt}"


def save_request(log_dir: Path, request: LaunchRequest) -> None:
    data = asdict(request)
    data["resources"] = request.resources.as_dict()
    tmp = log_dir / (REQUEST_FILE + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, log_dir / REQUEST_FILE)


def load_request(log_dir: Path) -> LaunchRequest | None:
    try:
        data = json.loads((log_dir / REQUEST_FILE).read_text())
        return LaunchRequest(**{
            **data, "resources": Resources.of(data["resources"]), "command": tuple(data["command"]),
            "env": tuple(tuple(pair) for pair in data["env"]),
        })
    except (OSError, ValueError, KeyError, TypeError):
        return None


def task_user(requested: str, default_user: str, allow_root: bool) -> str:
    """The user a task runs as: its own, else the agent's default ("" = the agent's own
    user). Root only where the operator allowed it; an unknown user is the task's failure."""
    user = requested or default_user
    if user:
        try:
            uid = pwd.getpwuid(int(user)).pw_uid if user.isdigit() else pwd.getpwnam(user).pw_uid
        except KeyError:
            raise LaunchError(f"user {user!r} does not exist on this node") from None
    else:
        uid = os.geteuid()
    if uid == 0 and not allow_root:
        raise LaunchError(f"tasks may not run as root (user {user or 'of the agent'!r}) on this node; "
                          "the operator can allow it with `tcl-agent --allow-root`")
    return user
