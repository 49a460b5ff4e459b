"""The agent's launch record: each launch it takes is kept as launch.json (the one
job-spec codec, JSON, mode 0600: it holds the task's environment) beside the task's logs,
so a restarted agent knows what each container it finds on disk belongs to.

The record's keys are those the first agents wrote; a launch's `node` and `lotes_class`
are not kept (the agent is the node; the class comes again with the master's BinTarget)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tcluster.wire.codec import spec_from_dict, spec_to_dict
from tcluster.domain.launch import Launch

RECORD_FILE = "launch.json"
# Checked before a task id is used in any path: a master can never make the agent write
# outside its state directory.
_TASK_ID = re.compile(r"^[0-9a-f]{8}\.[0-9]{1,5}$")


def valid_task_id(task_id: str) -> bool:
    return bool(_TASK_ID.match(task_id))


def record_to_dict(launch: Launch, gpus: tuple[int, ...] = ()) -> dict[str, object]:
    """`gpus`: the device indices the agent bound the attempt to (only written when some
    were: records of tasks without GPUs keep the first agents' keys)."""
    assert launch.spec is not None
    record: dict[str, object] = {"task_id": launch.task_id, "attempt": launch.attempt, "job_id": launch.job_id,
                                 "index": launch.index, "spec": spec_to_dict(launch.spec)}
    if gpus:
        record["gpus"] = list(gpus)
    return record


def record_from_dict(data: dict[str, object]) -> Launch:
    spec = data["spec"]
    if not isinstance(spec, dict):
        raise ValueError("launch record without a spec")
    return Launch(task_id=str(data["task_id"]), attempt=int(data["attempt"]),  # type: ignore[call-overload]
                  job_id=str(data["job_id"]), index=int(data["index"]),  # type: ignore[call-overload]
                  spec=spec_from_dict(spec))


def save_record(log_dir: Path, launch: Launch, gpus: tuple[int, ...] = ()) -> None:
    """Atomic, fsynced and 0600 (the spec holds the task's environment)."""
    tmp = log_dir / (RECORD_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, json.dumps(record_to_dict(launch, gpus)).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, log_dir / RECORD_FILE)


def load_record(log_dir: Path) -> Launch | None:
    try:
        return record_from_dict(json.loads((log_dir / RECORD_FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_gpus(log_dir: Path) -> tuple[int, ...]:
    """The GPU binding kept in the record; () when none (or no readable record)."""
    try:
        data = json.loads((log_dir / RECORD_FILE).read_text())
        return tuple(int(i) for i in data.get("gpus", ()))
    except (OSError, ValueError, TypeError, AttributeError):
        return ()
