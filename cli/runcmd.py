"""`tcl run [-i] [-t] [submit flags] -- CMD`: submit a one-task job and attach to it, as
`srun --pty bash` does.

How: the job's task is a small placeholder shell (RUN_PLACEHOLDER) that waits for the
attached command; once the task is RUNNING, `tcl run` execs CMD into it exactly as `tcl
exec` does (one relay, one set of rules: flow control, TTY, the task's cgroup, namespaces,
user and directory), through a wrapper that records CMD's pid and exit code in the task's
private /tmp. The placeholder ends with that exit code, so the job SUCCEEDS or FAILS as CMD
did and `tcl run` exits with the task's code. Chosen over relaying a task's own stdio: the
task supervisor (agent/shim.c) writes a task's output to its log files and gives it no
stdin, and exec already brings everything an attached command needs, so nothing new runs
on the node. If CMD is killed without an exit code (the client vanished, the node lost the
master) the placeholder ends the task FAILED (exit 129); a client that never attaches
leaves it to end after ATTACH_TIMEOUT_S. Ctrl-C while waiting, or without -t, cancels the
job; under -t, Ctrl-C goes to the remote terminal (as with srun --pty and ssh)."""

from __future__ import annotations

import argparse
import signal
import sys
import time
import uuid
from dataclasses import replace
from typing import Any

from tcluster.cli.execcmd import EXIT_FAILURE, attach, command_of
from tcluster.v1 import common_pb2, jobs_pb2

ATTACH_TIMEOUT_S = 120
POLL_S = 0.5
END_WAIT_S = 30.0
NO_EXIT_CODE = 129
RUN_FILE = "/tmp/.tcl-run-$TCL_JOB_ID"
RUN_PLACEHOLDER = (
    f'f={RUN_FILE}; i=0\n'
    f'while [ ! -s "$f.pid" ]; do i=$((i+1)); if [ $i -gt {ATTACH_TIMEOUT_S * 5} ]; then '
    f'echo "tcl run: no client attached within {ATTACH_TIMEOUT_S} s" >&2; exit 125; fi; sleep 0.2; done\n'
    'pid=$(cat "$f.pid")\n'
    'while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done\n'
    'rc=$(cat "$f.rc" 2>/dev/null); rm -f "$f.pid" "$f.rc"\n'
    'if [ -n "$rc" ]; then exit "$rc"; fi\n'
    f'echo "tcl run: the attached command ended without an exit code (its client or node went away)" >&2; '
    f'exit {NO_EXIT_CODE}\n')
# The placeholder runs as the job's script, so the job's command stays the user's CMD (what
# `tcl jobs` and `tcl show` list); the script gets CMD's words as arguments and ignores them.
RUN_SCRIPT = "#!/bin/sh\n# tcl run: waits for the command tcl run attaches, then exits with its code\n" + RUN_PLACEHOLDER
RUN_WRAPPER = f'f={RUN_FILE}; echo $$ > "$f.pid"; "$@"; rc=$?; echo $rc > "$f.rc"; exit $rc'


def run_cmd(args: argparse.Namespace, client: Any) -> int:
    from tcluster.cli.spec import submission_spec
    from tcluster.wire.protobuf import spec_to_pb
    command = command_of(list(args.command))
    if not command:
        print("error: command: give the command after --, e.g. tcl run -it -- bash", file=sys.stderr)
        return 2
    args.command, args.dashdash = command, True       # CMD is no script of ours to read
    spec = replace(submission_spec(args), script=RUN_SCRIPT)
    if spec.tasks != 1 or spec.array:
        print("error: --tasks/--array: tcl run runs one task (use tcl submit for more)", file=sys.stderr)
        return 2
    spec = replace(spec, request_id=spec.request_id or uuid.uuid4().hex)
    job = client.submit(spec_to_pb(spec))
    print(f"tcl run: job {job.id} submitted", file=sys.stderr, flush=True)
    cancel_on = [signal.SIGTERM, signal.SIGHUP] + ([] if args.tty else [signal.SIGINT])
    old = {s: signal.signal(s, _interrupt) for s in cancel_on}
    try:
        if not _wait_running(client, job.id):
            return _task_code(client.get(job.id))
        wrapped = ["/bin/sh", "-c", RUN_WRAPPER, "tcl-run", *command]
        code = attach(client, job.id, 0, wrapped, args.stdin, args.tty)
        return _task_code(_wait_end(client, job.id), code)
    except KeyboardInterrupt:
        client.cancel(job.id)
        print(f"\ntcl run: job {job.id} cancelled", file=sys.stderr)
        return 130
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _wait_running(client: Any, job_id: str) -> bool:
    """True once task 0 runs; False if the job ended first. Each change on stderr."""
    last = ""
    while True:
        job = client.get(job_id)
        task = next((t for t in job.tasks if t.index == 0), None)
        state = common_pb2.TaskState.Name(task.state).removeprefix("TASK_") if task is not None else "PENDING"
        line = f"tcl run: job {job_id}: {state}" + (f" ({task.reason})" if task is not None and task.reason else "")
        if line != last:
            print(line, file=sys.stderr, flush=True)
            last = line
        if state == "RUNNING":
            return True
        if state in ("SUCCEEDED", "FAILED", "KILLED", "LOST") and job.state not in (
                jobs_pb2.JOB_PENDING, jobs_pb2.JOB_RUNNING):
            return False
        time.sleep(POLL_S)


def _wait_end(client: Any, job_id: str) -> jobs_pb2.Job | None:
    deadline = time.monotonic() + END_WAIT_S
    while time.monotonic() < deadline:
        job = client.get(job_id)
        if job.state not in (jobs_pb2.JOB_PENDING, jobs_pb2.JOB_RUNNING):
            return job
        time.sleep(POLL_S / 2)
    return None


def _task_code(job: jobs_pb2.Job | None, fallback: int = EXIT_FAILURE) -> int:
    task = next((t for t in job.tasks if t.index == 0), None) if job is not None else None
    if task is None:
        return fallback
    if task.has_exit_code:
        return task.exit_code
    return 128 + task.signal if task.signal else fallback
