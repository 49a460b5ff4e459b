"""The helper `tcl exec` runs on the node: it joins a running task's container, then runs
the command there as the task's user, in its working directory, with its environment.

Run by the agent as `python -m tcluster.agent.execjoin FD`, FD holding a JSON spec. It
joins the task's cgroups (writes itself into each cgroup.procs the task's shim used),
then, for a task with namespaces, the IPC, UTS, network, PID and mount namespaces of the
task's first process (its init), and forks: only a child enters the PID namespace. The
child leads a new session (with a tty: the terminal's), drops to the task's uid, gid and
groups, changes into the task's working directory and execs the command.

The helper stays as the command's supervisor on the host: it ends with the command's exit
status (a signal is re-raised on itself, so the agent sees it as such). SIGTERM, SIGHUP or
SIGINT (the agent cancelling, or dying: PR_SET_PDEATHSIG) kill every process of the
command's session, so a client that leaves, or an agent that restarts, leaves nothing
behind; so does the command's own end (what it left running in its session ends too).
Because the command is in the task's cgroup and PID namespace, the task's end ends it.
Imports only the standard library: it starts in ~30 ms."""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import signal
import sys
import termios
from typing import Any, NoReturn

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
NAMESPACES = ("ipc", "uts", "net", "pid", "mnt")     # mnt last: /proc/<pid> is the host's until then
SETUP_FAILED = 126      # as a shell says of a command it cannot run
NOT_FOUND = 127

_libc = ctypes.CDLL(None, use_errno=True)


def _fail(message: str, code: int = SETUP_FAILED) -> NoReturn:
    os.write(2, f"tcl exec: {message}\n".encode(errors="replace"))
    os._exit(code)


def _prctl_deathsig(signum: int) -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)


def _setns(fd: int) -> None:
    if _libc.setns(fd, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def join(spec: dict[str, Any]) -> None:
    """Into the task's cgroups, then its namespaces (this process; children get the PID one)."""
    for procs in spec.get("procs", []):
        try:
            with open(procs, "w") as f:
                f.write("0")
        except OSError as e:
            _fail(f"cannot join the task's cgroup {procs}: {e.strerror} (has the task ended?)")
    pid = int(spec.get("task_pid") or 0)
    if not spec.get("ns") or pid <= 0:
        return
    try:
        fds = [os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC) for name in NAMESPACES]
    except OSError as e:
        _fail(f"cannot open the task's namespaces (/proc/{pid}/ns): {e.strerror} (has the task ended?)")
    for name, fd in zip(NAMESPACES, fds):
        try:
            _setns(fd)
        except OSError as e:
            _fail(f"cannot enter the task's {name} namespace: {e.strerror}")
        os.close(fd)


def become(spec: dict[str, Any]) -> NoReturn:
    """The child: the task's session, user and directory, then the command."""
    os.setsid()
    if spec.get("tty"):
        try:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        except OSError:
            pass                          # still a terminal on stdio; job control may complain
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("0")                  # the agent's -900 is not the task's
    except OSError:
        pass
    if spec.get("uid") is not None:
        try:
            os.setgroups([int(g) for g in spec.get("groups", [])])
            os.setgid(int(spec["gid"]))
            os.setuid(int(spec["uid"]))
        except OSError as e:
            _fail(f"cannot switch to uid {spec['uid']} gid {spec.get('gid')}: {e.strerror}")
    _prctl_deathsig(signal.SIGKILL)       # after setuid, which clears it
    # As the task's own processes (shim.c; an image's no-new-privileges): a setuid file, e.g.
    # a setuid-root binary in an image, gives CMD nothing its user lacks.
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        _fail(f"cannot set no_new_privs: {os.strerror(ctypes.get_errno())}")
    cwd = spec.get("cwd") or "/"
    try:
        os.chdir(cwd)
    except OSError as e:
        _fail(f"cannot enter the task's working directory {cwd}: {e.strerror}")
    argv = [str(a) for a in spec["argv"]]
    env = {str(k): str(v) for k, v in spec.get("env", {}).items()}
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        _not_found(argv[0], env, cwd)
    except PermissionError as e:
        # execvp reports EACCES when some PATH directory could not be searched (an exported
        # PATH may name the submitter's own, e.g. /root/.cargo/bin) even if the command is
        # nowhere: as a shell, that is "not found" (127); a file found but not runnable is 126.
        if "/" not in argv[0] and not _in_path(argv[0], env.get("PATH", os.defpath)):
            _not_found(argv[0], env, cwd)
        _fail(f"cannot run {argv[0]!r}: {e.strerror}")
    except OSError as e:
        _fail(f"cannot run {argv[0]!r}: {e.strerror}")


def _in_path(name: str, path: str) -> bool:
    return any(os.path.isfile(os.path.join(d or ".", name)) for d in path.split(":"))


def _not_found(name: str, env: dict[str, str], cwd: str) -> NoReturn:
    _fail(f"{name!r} not found in the task's PATH ({env.get('PATH', '')[:300]}) nor its working directory {cwd}",
          NOT_FOUND)


def session_members(proc_fd: int, sid: int) -> list[int]:
    """Host pids of the processes in session `sid` (read through the host's /proc)."""
    members = []
    for name in os.listdir(proc_fd):
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"{name}/stat", os.O_RDONLY, dir_fd=proc_fd)
            try:
                stat = os.read(fd, 4096).decode(errors="replace")
            finally:
                os.close(fd)
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 3 and fields[3] == str(sid):
            members.append(int(name))
    return members


def kill_session(proc_fd: int, sid: int) -> None:
    for _ in range(5):                    # a fork racing the first pass is caught by the next
        members = session_members(proc_fd, sid)
        if not members:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def supervise(child: int, proc_fd: int) -> NoReturn:
    def stop(signum: int, frame: object) -> None:
        kill_session(proc_fd, child)
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, stop)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
    kill_session(proc_fd, child)          # what the command left running in its session
    if os.WIFSIGNALED(status):
        ended_by = os.WTERMSIG(status)
        signal.signal(ended_by, signal.SIG_DFL)
        os.kill(os.getpid(), ended_by)
    os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128 + os.WTERMSIG(status))


def main() -> NoReturn:
    _prctl_deathsig(signal.SIGTERM)       # the agent gone: end the command
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        _fail("usage: python -m tcluster.agent.execjoin FD")
    fd = int(sys.argv[1])
    with os.fdopen(fd, "rb") as f:
        spec = json.loads(f.read())
    if os.getppid() == 1:
        _fail("the agent is gone")
    proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)   # the host's, kept
    join(spec)
    child = os.fork()
    if child == 0:
        os.close(proc_fd)
        become(spec)
    supervise(child, proc_fd)


if __name__ == "__main__":
    main()
