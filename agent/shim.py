"""Per-task supervisor ("shim"). Standard library only: the runtime runs it as
`python -S shim.py SPEC_JSON` in a new session, so it outlives the agent and a terminal's
Ctrl-C never reaches it or the task.

The spec JSON (written by the runtime) holds argv, env, cwd, uid/gid/groups (or null),
cgroup_procs, stdout, stderr and exit_path. The shim forks the task, which enters its
cgroups and drops privileges *before* exec, so not one instruction of the task runs
outside its limits. Then the shim prints exactly one line on stdout,
`started <pid> <unix_time>` or `error <message>`, closes stdout (the agent may be gone),
waits for the task and writes {"exit_code", "signal", "finished_at"} atomically to
exit_path, so an exit is recorded even while no agent is running."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any, NoReturn

_EXEC_FAILED = 127


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _say(line: str) -> None:
    try:
        os.write(1, (line + "\n").encode())
    except OSError:
        pass     # EPIPE: the agent stopped listening; the exit record still gets written


def _close_stdout() -> None:
    # Point fd 1 at /dev/null: the agent sees EOF, and nothing later can get EPIPE.
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)


def _open_logs(spec: dict[str, Any]) -> tuple[int, int]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    out = os.open(spec["stdout"], flags, 0o644)
    err = out if spec["stderr"] == spec["stdout"] else os.open(spec["stderr"], flags, 0o644)
    return out, err


def _drop_privileges(spec: dict[str, Any]) -> None:
    if spec.get("uid") is None:
        return
    # Order matters: supplementary groups and gid need root, so setuid comes last.
    os.setgroups(spec.get("groups") or [])
    os.setgid(spec["gid"])
    os.setuid(spec["uid"])


def _default_signals() -> None:
    # exec keeps ignored signals ignored (Python ignores SIGPIPE and SIGXFSZ) and keeps the
    # signal mask: a task must start with the defaults it would get from a shell.
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def _child(spec: dict[str, Any], report: int) -> NoReturn:
    step = "cannot start a new session"
    try:
        os.setsid()      # the task leads its own session: killpg(task pid) reaches its group
        for path in spec["cgroup_procs"]:
            step = f"cannot enter cgroup {path}"
            with open(path, "w") as f:      # "0" = the writing process itself
                f.write("0")
        # Logs are opened as root, before dropping privileges: the task's user need not
        # be able to write the agent's state directory.
        step = "cannot open the log files"
        out, err = _open_logs(spec)
        step = f"cannot switch to uid {spec.get('uid')} gid {spec.get('gid')}"
        _drop_privileges(spec)
        step = f"cannot chdir to {spec['cwd']}"
        os.chdir(spec["cwd"])
        step = "cannot redirect stdio"
        null = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
        _default_signals()
        argv = spec["argv"]
        step = f"exec failed: {argv[0]!r}"
        os.execvpe(argv[0], argv, spec["env"])
    except OSError as e:
        message = f"{step}: {e.strerror or e}"
        if step.startswith("exec failed"):
            message = f"exec failed: {e.strerror or e}: {spec['argv'][0]!r}"
    except BaseException as e:  # noqa: BLE001 - whatever it is, the agent must hear of it
        message = f"{step}: {e!r}"
    try:
        os.write(report, _one_line(message).encode())
    finally:
        os._exit(_EXEC_FAILED)


def _read_report(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def _wait(pid: int) -> dict[str, Any]:
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return {"exit_code": None, "signal": os.WTERMSIG(status), "finished_at": time.time()}
    return {"exit_code": os.WEXITSTATUS(status), "signal": 0, "finished_at": time.time()}


def _write_exit(path: str, record: dict[str, Any]) -> None:
    # tmp + fsync + rename: a reader sees no record or a whole one, even across a crash.
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        _say("error usage: shim.py SPEC_JSON")
        return 2
    try:
        with open(argv[1]) as f:
            spec = json.load(f)
    except (OSError, ValueError) as e:
        _say(_one_line(f"error cannot read the task spec {argv[1]}: {e}"))
        return 1
    # Close-on-exec pipe (os.pipe fds are non-inheritable): EOF without a word means the
    # exec succeeded; otherwise the child wrote why it failed.
    report_r, report_w = os.pipe()
    try:
        pid = os.fork()
    except OSError as e:
        _say(f"error cannot fork: {e.strerror}")
        return 1
    if pid == 0:
        os.close(report_r)
        _child(spec, report_w)
    os.close(report_w)
    failure = _read_report(report_r)
    os.close(report_r)
    _say(f"error {failure}" if failure else f"started {pid} {time.time():.6f}")
    _close_stdout()
    _write_exit(spec["exit_path"], _wait(pid))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
