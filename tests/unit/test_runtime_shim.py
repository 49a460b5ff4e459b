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

from tcluster.agent.runtime.launch import DEFAULT_PATH
from tcluster.agent.runtime.shimbin import shim_binary

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
