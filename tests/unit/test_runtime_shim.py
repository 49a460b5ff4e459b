"""The C shim on its own: its one line, the exit record, exec failures, clean signals and
env, and (as root) the task's namespaces. No cgroups; each case runs a few ms of real
processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tcluster.agent.runtime.base import TaskSpec
from tcluster.agent.runtime.launch import DEFAULT_PATH, Identity, ShimFiles, default_cwd, reachable, shim_spec
from tcluster.agent.runtime.shimbin import shim_binary
from tcluster.domain.resources import Resources

TIMEOUT = 20
SHIM = shim_binary()
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root")


def write_spec(tmp_path: Path, argv: list[str], **over: Any) -> Path:
    spec: dict[str, Any] = {"argv": argv, "env": [f"PATH={DEFAULT_PATH}"], "cwd": str(tmp_path),
                            "stdout": str(tmp_path / "out.log"), "stderr": str(tmp_path / "err.log"),
                            "exit": str(tmp_path / "exit.json")}
    spec.update(over)
    pairs = [(k, v) for k, vs in spec.items() for v in (vs if isinstance(vs, list) else [vs])]
    path = tmp_path / "shim.spec"
    path.write_bytes(b"".join(f"{k}\0{v}\0".encode() for k, v in pairs))
    return path


def run_shim(spec_path: Path) -> tuple[str, int]:
    proc = subprocess.run([str(SHIM), str(spec_path)], capture_output=True, text=True, timeout=TIMEOUT,
                          start_new_session=True)
    return proc.stdout, proc.returncode


def exit_record(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "exit.json").read_text())


def test_started_line_exit_record_and_logs(tmp_path: Path) -> None:
    out, rc = run_shim(write_spec(tmp_path, ["sh", "-c", "echo out; echo err >&2; exit 5"]))
    words = out.split()
    assert rc == 0 and out.count("\n") == 1
    assert words[0] == "started" and int(words[1]) > 0 and float(words[2]) > 1.6e9
    record = exit_record(tmp_path)
    assert (record["exit_code"], record["signal"]) == (5, 0) and record["finished_at"] >= float(words[2])
    assert (tmp_path / "out.log").read_text() == "out\n"
    assert (tmp_path / "err.log").read_text() == "err\n"
    assert not (tmp_path / "exit.json.tmp").exists()


def test_signal_death_is_recorded(tmp_path: Path) -> None:
    run_shim(write_spec(tmp_path, ["sh", "-c", "kill -TERM $$"]))
    assert exit_record(tmp_path)["exit_code"] is None and exit_record(tmp_path)["signal"] == 15


@pytest.mark.parametrize("argv,over,fragment", [
    (["no-such-program-tcl"], {}, "error exec failed: No such file or directory: 'no-such-program-tcl'"),
    (["/dev/null"], {}, "error exec failed: Permission denied"),
    (["true"], {"procs": ["/nonexistent/cgroup.procs"]}, "error cannot enter cgroup /nonexistent/"),
    (["true"], {"cwd": "/nonexistent-dir"}, "error cannot chdir to /nonexistent-dir: No such file"),
    (["true"], {"stdout": "/nonexistent-dir/out.log"}, "error cannot open the log files"),
])
def test_launch_failures_are_one_error_line(tmp_path: Path, argv: list[str], over: dict[str, Any],
                                            fragment: str) -> None:
    out, rc = run_shim(write_spec(tmp_path, argv, **over))
    assert rc == 1 and out.startswith(fragment) and out.count("\n") == 1, out
    assert not (tmp_path / "exit.json").exists()


def test_task_gets_default_signals_and_exact_env(tmp_path: Path) -> None:
    # The caller ignores SIGINT and blocks SIGUSR1; the shim ignores SIGTERM/SIGHUP itself.
    spec = write_spec(tmp_path, ["sh", "-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status; env | sort"],
                      env=[f"PATH={DEFAULT_PATH}", "ONLY=this"])
    subprocess.run([sys.executable, "-c",
                    "import signal,subprocess,sys; signal.signal(signal.SIGINT, signal.SIG_IGN);"
                    "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1]);"
                    f"subprocess.run([{str(SHIM)!r}, {str(spec)!r}], timeout={TIMEOUT})"],
                   timeout=TIMEOUT, check=True, capture_output=True)
    lines = (tmp_path / "out.log").read_text().splitlines()
    masks = {x.split(":")[0]: int(x.split()[1], 16) for x in lines if x.startswith("Sig")}
    assert masks["SigBlk"] == 0 and masks["SigIgn"] == 0, masks
    env_lines = [x for x in lines if not x.startswith("Sig")]
    assert sorted(x.split("=")[0] for x in env_lines if x.split("=")[0] not in ("PWD", "SHLVL", "_")) == \
        ["ONLY", "PATH"]


def test_exit_is_recorded_when_the_agent_stopped_listening(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["sh", "-c", f"touch {tmp_path}/up; sleep 0.3; exit 4"])
    proc = subprocess.Popen([str(SHIM), str(spec)], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    proc.stdout.close()                  # the agent died: the shim's line meets EPIPE
    deadline = time.monotonic() + TIMEOUT
    while not (tmp_path / "up").exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)     # and a stray SIGTERM does not cost the record
    assert proc.wait(TIMEOUT) == 0
    assert exit_record(tmp_path)["exit_code"] == 4


def test_unreadable_spec_is_an_error_line(tmp_path: Path) -> None:
    out, rc = run_shim(tmp_path / "missing.spec")
    assert out.startswith("error cannot read the task spec") and rc == 1


@needs_root
def test_namespaces_hostname_private_tmp_and_pid_1(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (Path("/tmp") / f"tcl-host-marker-{os.getpid()}").write_text("")
    try:
        script = "echo pid=$$; hostname; ls -A /tmp; ls /proc | grep -c '^[0-9]'; touch /tmp/mine"
        run_shim(write_spec(tmp_path, ["sh", "-c", script], ns="1", hostname="job1.0", tmp=str(tmp), cwd="/tmp"))
    finally:
        (Path("/tmp") / f"tcl-host-marker-{os.getpid()}").unlink()
    lines = (tmp_path / "out.log").read_text().splitlines()
    # The task is PID 2 (the shim's init is PID 1), sees only its own processes and its /tmp.
    assert lines[0] == "pid=2" and lines[1] == "job1.0"
    assert lines[2:-1] == [] and int(lines[-1]) <= 4, lines   # init, sh, ls, grep
    assert (tmp / "mine").exists() and exit_record(tmp_path)["exit_code"] == 0
    assert os.uname().nodename != "job1.0"


@needs_root
def test_namespaced_task_signal_and_user(tmp_path: Path) -> None:
    run_shim(write_spec(tmp_path, ["sh", "-c", "id -u; kill -TERM $$"], ns="1", hostname="h", uid="65534", cwd="/",
                        gid="65534", group="65534"))
    assert (tmp_path / "out.log").read_text() == "65534\n"
    assert (exit_record(tmp_path)["exit_code"], exit_record(tmp_path)["signal"]) == (None, 15)


# -- the task's process: privileges, OOM score, working directory ------------------------

def test_task_has_no_new_privs_and_oom_score_adj_0(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["sh", "-c", "grep NoNewPrivs /proc/$$/status; cat /proc/$$/oom_score_adj"])
    # The agent's unit runs it at -900; raising needs no privilege, lowering may be refused.
    subprocess.run([sys.executable, "-c",
                    "import subprocess\nfor v in ('-900', '500'):\n"
                    "  try: open('/proc/self/oom_score_adj', 'w').write(v); break\n"
                    "  except PermissionError: pass\n"
                    f"subprocess.run([{str(SHIM)!r}, {str(spec)!r}], timeout={TIMEOUT})"],
                   timeout=TIMEOUT, check=True, capture_output=True)
    assert (tmp_path / "out.log").read_text().split() == ["NoNewPrivs:", "1", "0"]


@needs_root
def test_cwd_is_entered_as_the_task_user(tmp_path: Path) -> None:
    # tmp_path's parents are 0700 root: entering it by path as nobody must fail the start.
    out, rc = run_shim(write_spec(tmp_path, ["pwd"], uid="65534", gid="65534", group="65534"))
    assert rc == 1 and out.startswith(f"error cannot chdir to {tmp_path}: Permission denied"), out
    out, rc = run_shim(write_spec(tmp_path, ["sh", "-c", "pwd; cd . && echo ok"], uid="65534", gid="65534",
                                  group="65534", cwd="/"))
    assert rc == 0 and (tmp_path / "out.log").read_text() == "/\nok\n"


@needs_root
def test_logs_belong_to_the_task_user_and_are_private(tmp_path: Path) -> None:
    (tmp_path / "err.log").write_text("old\n")
    (tmp_path / "err.log").chmod(0o644)
    run_shim(write_spec(tmp_path, ["sh", "-c", "echo out; echo err >&2"], uid="65534", gid="65534",
                        group="65534", cwd="/"))
    for name in ("out.log", "err.log"):
        st = (tmp_path / name).stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (65534, 65534, 0o600), name
    assert (tmp_path / "err.log").read_text() == "old\nerr\n"       # appended, as before
    assert (tmp_path / "exit.json").stat().st_mode & 0o077 == 0


# -- log_max: rotation through the shim ---------------------------------------------------

def test_log_max_rotates_each_stream_and_keeps_the_newest_bytes(tmp_path: Path) -> None:
    script = "printf 0123456789abcdefghij; printf XYZ; printf e >&2; [ -p /proc/$$/fd/1 ]"
    out, rc = run_shim(write_spec(tmp_path, ["sh", "-c", script], log_max="10"))
    assert rc == 0 and out.startswith("started")
    assert (tmp_path / "out.log.1").read_bytes() == b"abcdefghij"      # the older .1 was replaced
    assert (tmp_path / "out.log").read_bytes() == b"XYZ"
    assert (tmp_path / "err.log").read_bytes() == b"e" and not (tmp_path / "err.log.1").exists()
    assert exit_record(tmp_path)["exit_code"] == 0                      # stdout was a pipe


def test_log_max_shared_file_and_no_cap_writes_straight_to_the_file(tmp_path: Path) -> None:
    log = str(tmp_path / "all.log")
    run_shim(write_spec(tmp_path, ["sh", "-c", "echo 1; echo 2 >&2; echo 3"], stdout=log, stderr=log,
                        log_max="4"))
    # One stream, cut at exactly 4 bytes, whatever the chunks the pipe delivered.
    assert ((tmp_path / "all.log.1").read_text(), (tmp_path / "all.log").read_text()) == ("1\n2\n", "3\n")
    run_shim(write_spec(tmp_path, ["sh", "-c", "[ -f /proc/$$/fd/1 ] && echo file"], log_max="0"))
    assert (tmp_path / "out.log").read_text() == "file\n" and not (tmp_path / "out.log.1").exists()


def test_log_max_drain_is_bounded_when_an_orphan_holds_the_pipe(tmp_path: Path) -> None:
    pid_file = tmp_path / "orphan.pid"
    script = f"echo hi; sleep 60 & echo $! > {pid_file}; exit 6"
    try:
        out, rc = run_shim(write_spec(tmp_path, ["sh", "-c", script], log_max="1000"))
        assert rc == 0 and exit_record(tmp_path)["exit_code"] == 6
        assert (tmp_path / "out.log").read_text() == "hi\n"
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_log_max_stalled_disk_drops_the_oldest_output_instead_of_blocking(tmp_path: Path) -> None:
    # A FIFO nobody reads stands in for a disk that stopped: the shim's writer blocks on it.
    log = tmp_path / "out.log"
    os.mkfifo(log)
    held = os.open(log, os.O_RDONLY | os.O_NONBLOCK)
    done = tmp_path / "done"
    script = f"head -c {4 * 2**20} /dev/zero; echo END; touch {done}"     # beyond every buffer
    proc = subprocess.Popen([str(SHIM), str(write_spec(tmp_path, ["sh", "-c", script], log_max=str(2**30)))],
                            stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert done.exists(), "the task was held by the stalled log"
        os.set_blocking(held, True)
        data = b"".join(iter(lambda: os.read(held, 2**16), b""))        # EOF: the shim has exited
    finally:
        proc.kill() if proc.poll() is None else None
        proc.wait(TIMEOUT)
        os.close(held)
    assert b"bytes of output lost: the log disk was too slow or failing]" in data
    assert data.endswith(b"\0END\n") and len(data) < 4 * 2**20
    assert exit_record(tmp_path)["exit_code"] == 0


def test_task_gets_epipe_once_a_capped_shim_is_killed(tmp_path: Path) -> None:
    # Nobody reads its pipes any more: SIGPIPE (ignored here, so EPIPE) on its next write.
    script = f"trap '' PIPE; while echo x; do sleep 0.01; done; echo gone > {tmp_path}/epipe"
    proc = subprocess.Popen([str(SHIM), str(write_spec(tmp_path, ["sh", "-c", script], log_max="100"))],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    task = int(proc.stdout.readline().split()[1])
    proc.kill()
    proc.wait(TIMEOUT)
    epipe = tmp_path / "epipe"
    deadline = time.monotonic() + TIMEOUT
    while not (epipe.exists() and epipe.read_text()) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        assert epipe.read_text() == "gone\n"        # its write failed: EPIPE
        assert not (tmp_path / "exit.json").exists()
    finally:
        try:
            os.kill(task, signal.SIGKILL)
        except ProcessLookupError:
            pass


# -- the spec the agent writes -------------------------------------------------------------

NOBODY = Identity(65534, 65534, (65534,), "nobody", "/nonexistent")


def spec_pairs(log_max: int, namespaces: bool = True) -> list[tuple[str, str]]:
    spec = TaskSpec(key="k.0", task_id="k", attempt=0, command=("true",), resources=Resources(1, 0),
                    stdout_path="/l/out", stderr_path="/l/err", log_max_bytes=log_max, namespaces=namespaces)
    files = ShimFiles(Path("/s/spec"), Path("/s/exit"), Path("/s/log"), "/tmp", Path("/s/tmp"))
    words = shim_spec(spec, NOBODY, files, []).split(b"\0")[:-1]
    return [(k.decode(), v.decode()) for k, v in zip(words[::2], words[1::2])]


@pytest.mark.parametrize("log_max,expected", [(0, []), (-1, []), (2**20, [str(2**20)])])
def test_shim_spec_carries_log_max_only_when_capped(log_max: int, expected: list[str]) -> None:
    assert [v for k, v in spec_pairs(log_max) if k == "log_max"] == expected


def test_default_cwd_is_tmp_in_the_namespace_else_a_reachable_home(tmp_path: Path) -> None:
    assert default_cwd(NOBODY, namespaces=True) == "/tmp"
    assert default_cwd(NOBODY, namespaces=False) == "/"          # its home does not exist
    home = tmp_path / "home"
    home.mkdir()
    tmp_path.chmod(0o700)
    user = Identity(os.getuid() + 1 if os.getuid() else 65534, 65534, (), "u", str(home))
    assert not reachable(str(home), user) and default_cwd(user, namespaces=False) == "/"
    tmp_path.chmod(0o711)
    assert reachable(str(home), user) == all(os.stat(d).st_mode & 0o001 for d in home.parents)
    assert reachable(str(home), None) and not reachable("relative", None)
    assert not reachable(str(tmp_path / "missing"), None)
