"""The fence without an agent, for docker tasks (issue 36). A container has no shim, so a
dead agent's docker task of a job with retries would run on past the fence and overlap the
copy the master places after LOST. Beside each such container the agent starts the shim in
watch mode (`tcl-shim --watch`, agent/shim.c): a detached process that reads the same lease
(last_heard.json) and, once it is fence_s + 1 s old, kills every process of the container's
cgroup and records the fence here, so that the agent reports the attempt KILLED when it is
back. It outlives the agent (as shims do: the unit's KillMode=process), holds a lock so a
re-adopting agent never starts a second one, and exits when the container ends.

Per container key, in the agent's state dir (fence_dir): <key>.lock (the watcher's flock)
and <key>.fenced (the record); both go with the container (forget), or at the next start if
the container went while the agent was down (prune)."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

from .base import ExitStatus
from .launch import DEFAULT_PATH
from .shimbin import shim_binary

log = logging.getLogger(__name__)

WATCH_START_TIMEOUT_S = 10.0


def start_watch(fence_dir: Path, key: str, lease: str, pid: int, procs: list[Path]) -> str:
    """Start the watcher of container `key` (its init: host pid `pid`; its cgroup.procs
    files: `procs`), unless one already runs. Returns its one line: `watching <pid>`,
    `watching already`, `ended` (the init is gone) or `error ...` (logged)."""
    fence_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    argv = [str(shim_binary()), "--watch", lease, str(pid), str(record_path(fence_dir, key)),
            str(fence_dir / f"{key}.lock"), *map(str, procs)]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd="/",
                              env={"PATH": DEFAULT_PATH}, timeout=WATCH_START_TIMEOUT_S, start_new_session=True)
        line = (done.stdout.strip() or done.stderr.strip() or f"exit status {done.returncode}").splitlines()[0]
    except (OSError, subprocess.TimeoutExpired) as e:
        line = f"error {e}"
    if not line.startswith(("watching", "ended")):
        log.warning("no fence watcher for container %s (it is fenced only while the agent runs): %s", key, line)
    return line


def record_path(fence_dir: Path, key: str) -> Path:
    return fence_dir / f"{key}.fenced"


def fenced(fence_dir: Path, key: str, status: ExitStatus) -> ExitStatus:
    """`status` (from the engine) as the watcher's fence made it, if it did."""
    try:
        record = json.loads(record_path(fence_dir, key).read_text())
    except (OSError, ValueError):
        return status
    if not isinstance(record, dict) or not record.get("fenced"):
        return status
    reason = (f"cut off from the master for {float(record.get('silence_s') or 0):.0f}s; the container's fence "
              "watcher stopped it at the fence (no agent renewed the lease): it may run elsewhere")
    return ExitStatus(status.exit_code, status.signal, status.finished_at, status.oom_killed, reason, True)


def forget(fence_dir: Path, key: str) -> None:
    for path in (record_path(fence_dir, key), fence_dir / f"{key}.lock"):
        path.unlink(missing_ok=True)


def prune(fence_dir: Path, containers: set[str]) -> list[str]:
    """Forgets the keys with files here but no container in the engine (removed while the
    agent was down: no remove() of the agent forgot them, and a gone container's exit is
    "gone" whatever its record says). Returns the keys forgotten."""
    if not fence_dir.is_dir():
        return []
    keys = {p.name.rsplit(".", 1)[0] for p in fence_dir.iterdir() if p.suffix in (".lock", ".fenced")}
    gone = sorted(keys - containers)
    for key in gone:
        forget(fence_dir, key)
    return gone
