"""A task's output files (`--stdout-file`, `--stderr-file`) and job script on the node.

Design: the user's file *replaces* the agent's log for that stream. The supervisor (shim.c)
opens it as the task's user, after entering the task's working directory, and the task
writes to it directly, as it does to the agent's log without a cap. So nothing copies the
output: an agent restart, or the agent being down, neither loses nor duplicates a byte of
it, and the file is complete when the task ends. `tcl logs` reads the user's file (its path
is kept beside the launch record, outputs.json) instead of the agent's, so it keeps working
for as long as the user keeps the file; the agent's retention and `--log-max` rotation do
not apply to a file the user named (Slurm rotates and deletes nothing either).

A tee (the agent's log and the user's file both) would need the shim to copy every byte
as the task's user into a path resolved in the task's mount namespace, and would keep two
copies on disk; the agent's own log then adds nothing the user's file lacks."""

from __future__ import annotations

import json
import os
import posixpath
import pwd
from dataclasses import dataclass
from pathlib import Path

from tcluster.agent.runtime.launch import default_cwd, resolve_user
from tcluster.domain.launch import Launch
from tcluster.domain.outputfiles import OutputNames, expand, names_each_task
from tcluster.domain.scripts import script_argv

OUTPUTS_FILE = "outputs.json"


@dataclass(frozen=True)
class TaskOutputs:
    """What the shim gets for one attempt: paths as the task sees them ("" = the agent's log)."""
    stdout_file: str = ""
    stderr_file: str = ""
    append: bool = False
    script: str = ""
    command: tuple[str, ...] = ()


def task_outputs(request: Launch, user: str, node: str = "") -> TaskOutputs:
    """Expanded patterns, the open mode, and the command (a script runs by its interpreter)."""
    spec = request.spec
    assert spec is not None
    names = OutputNames(request.job_id, request.index, user_name(user), spec.name or _command_name(spec.command),
                        node)
    stdout = expand(spec.stdout_file, names) if spec.stdout_file else ""
    # sbatch: without -e, stderr follows stdout into its file.
    stderr = expand(spec.stderr_file, names) if spec.stderr_file else stdout
    command = script_argv(spec.script, spec.command) if spec.script else spec.command
    return TaskOutputs(stdout, stderr, append=_appends(request), script=spec.script, command=command)


def _appends(request: Launch) -> bool:
    """Append unless asked otherwise for a task's first attempt on its own file: a retry or a
    requeue adds to what the earlier attempt wrote, and tasks that share one file (no %t or
    %a in it) never truncate each other's output."""
    spec = request.spec
    assert spec is not None
    if spec.open_mode == "append" or request.attempt > 1:
        return True
    several = bool(spec.array) or spec.tasks > 1
    patterns = [p for p in (spec.stdout_file, spec.stderr_file) if p]
    return several and not all(names_each_task(p) for p in patterns)


def user_name(user: str) -> str:
    """The Unix name a task runs as (%u): its user, or the agent's own."""
    try:
        if not user:
            return pwd.getpwuid(os.geteuid()).pw_name
        return pwd.getpwuid(int(user)).pw_name if user.isdigit() else user
    except KeyError:
        return user or str(os.geteuid())


def _command_name(command: tuple[str, ...]) -> str:
    return posixpath.basename(command[0]) if command else ""


def save_outputs(log_dir: Path, outputs: TaskOutputs, cwd: str, uid: int, private_tmp: bool = False) -> None:
    """Where `tcl logs` finds a redirected stream (the absolute path, as the task saw it)
    and whose file it must be. Not a file in the task's private /tmp (`private_tmp`): that
    is no path on the node's own filesystem, and it goes with the task."""
    resolved = {name: posixpath.normpath(posixpath.join(cwd, path))
                for name, path in (("stdout", outputs.stdout_file), ("stderr", outputs.stderr_file)) if path}
    paths: dict[str, object] = {name: path for name, path in resolved.items()
                                if not (private_tmp and _under_tmp(path))}
    if paths:
        (log_dir / OUTPUTS_FILE).write_text(json.dumps({**paths, "uid": uid}))


def _under_tmp(path: str) -> bool:
    return path == "/tmp" or path.startswith("/tmp/")


def log_source(log_dir: Path, stream: str) -> tuple[Path, int | None]:
    """The file `tcl logs` reads for `stream` and the uid that must own it: the user's file
    when the task wrote there (its user's uid), else the agent's log (None: no check)."""
    try:
        record = json.loads((log_dir / OUTPUTS_FILE).read_text())
        redirected, uid = record.get(stream), record.get("uid")
    except (OSError, ValueError, AttributeError):
        return log_dir / stream, None
    if not isinstance(redirected, str) or not redirected:
        return log_dir / stream, None
    return Path(redirected), uid if isinstance(uid, int) else -1


def prepare_outputs(log_dir: Path, request: Launch, user: str, namespaces: bool, node: str = "") -> TaskOutputs:
    """The attempt's outputs, with their paths kept for `tcl logs` (before the task starts)."""
    outputs = task_outputs(request, user, node)
    if outputs.stdout_file or outputs.stderr_file:
        assert request.spec is not None
        ident = resolve_user(user)
        cwd = request.spec.workdir or request.spec.submit_dir or default_cwd(ident, namespaces)
        save_outputs(log_dir, outputs, cwd, ident.uid if ident is not None else os.geteuid(), namespaces)
    return outputs
