"""What the master asks an agent to run, and the agent's policy on whom it runs as.

A request is kept as a launch record (the one job-spec codec, JSON, mode 0600: it holds
the task's environment) beside the task's logs, so a restarted agent knows what each
container it finds on disk belongs to."""

from __future__ import annotations

import json
import os
import pwd
import re
from dataclasses import dataclass
from pathlib import Path

from tcluster.agent.runtime.base import LaunchError
from tcluster.codec import spec_from_dict, spec_to_dict
from tcluster.model import JobSpec
from tcluster.resources import Resources

REQUEST_FILE = "launch.json"
# Checked before a task id is used in any path: a master can never make the agent write
# outside its state directory.
_TASK_ID = re.compile(r"^[0-9a-f]{8}\.[0-9]{1,5}$")


def valid_task_id(task_id: str) -> bool:
    return bool(_TASK_ID.match(task_id))


@dataclass(frozen=True)
class LaunchRequest:
    task_id: str
    attempt: int
    job_id: str
    index: int
    spec: JobSpec | None       # None only for a kill of an attempt this agent does not have

    @property
    def key(self) -> str:
        return f"{self.task_id}.{self.attempt}"

    @property
    def resources(self) -> Resources:
        return self.spec.resources if self.spec is not None else Resources()


def request_to_dict(request: LaunchRequest) -> dict[str, object]:
    assert request.spec is not None
    return {"task_id": request.task_id, "attempt": request.attempt, "job_id": request.job_id,
            "index": request.index, "spec": spec_to_dict(request.spec)}


def request_from_dict(data: dict[str, object]) -> LaunchRequest:
    spec = data["spec"]
    if not isinstance(spec, dict):
        raise ValueError("launch record without a spec")
    return LaunchRequest(task_id=str(data["task_id"]), attempt=int(data["attempt"]),  # type: ignore[call-overload]
                         job_id=str(data["job_id"]), index=int(data["index"]),  # type: ignore[call-overload]
                         spec=spec_from_dict(spec))


def save_request(log_dir: Path, request: LaunchRequest) -> None:
    """Atomic, fsynced and 0600 (the spec holds the task's environment)."""
    tmp = log_dir / (REQUEST_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, json.dumps(request_to_dict(request)).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, log_dir / REQUEST_FILE)


def load_request(log_dir: Path) -> LaunchRequest | None:
    try:
        return request_from_dict(json.loads((log_dir / REQUEST_FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def parse_uid_ranges(text: str) -> tuple[tuple[int, int], ...]:
    """'0-999,5000' -> ((0, 999), (5000, 5000)); '' or 'none' -> (). Raises ValueError."""
    ranges = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part.lower() == "none":
            continue
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ValueError(f"{part[:40]!r} is not a uid or a range of uids like 0-999")
        first, last = int(low), int(high) if sep else int(low)
        if first > last:
            raise ValueError(f"{part[:40]!r}: the range is empty ({first} > {last})")
        ranges.append((first, last))
    return tuple(ranges)


def _nobody_uid() -> int:
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return -1


def task_user(requested: str, default_user: str, allow_root: bool,
              deny_uids: tuple[tuple[int, int], ...] = ()) -> str:
    """The user a task runs as: its own, else the agent's default ("" = the agent's own
    user). Root only where the operator allowed it; other uids in `deny_uids` (system
    users, by default) never, whatever the master asks, except the nobody user. An unknown
    or refused user is the task's failure, with the reason."""
    user = requested or default_user
    if user:
        try:
            uid = pwd.getpwuid(int(user)).pw_uid if user.isdigit() else pwd.getpwnam(user).pw_uid
        except KeyError:
            raise LaunchError(f"user {user!r} does not exist on this node") from None
    else:
        uid = os.geteuid()
    if uid == 0:
        if not allow_root:
            raise LaunchError(f"tasks may not run as root (user {user or 'of the agent'!r}) on this node; "
                              "the operator can allow it with `tcl-agent --allow-root`")
        return user
    if uid != _nobody_uid() and any(first <= uid <= last for first, last in deny_uids):
        refused = ",".join(f"{a}-{b}" if a != b else str(a) for a, b in deny_uids)
        raise LaunchError(f"tasks may not run as {user or 'the agent user'!r} (uid {uid}) on this node: uids {refused} "
                          "are refused (`tcl-agent --deny-uids`)")
    return user
