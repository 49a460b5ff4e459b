"""The shim on its own: its one line, the exit record, exec failures, clean signals and
env. No cgroups (cgroup_procs is empty); each case runs a few ms of real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tcluster.agent.runtime.launch import DEFAULT_PATH, SHIM_PATH

TIMEOUT = 20


def write_spec(tmp_path: Path, argv: list[str], **over: Any) -> Path:
    spec = {"argv": argv, "env": {"PATH": DEFAULT_PATH}, "cwd": str(tmp_path), "uid": None,
            "gid": None, "groups": None, "cgroup_procs": [], "stdout": str(tmp_path / "out.log"),
            "stderr": str(tmp_path / "err.log"), "exit_path": str(tmp_path / "exit.json")}
    spec.update(over)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def run_shim(spec_path: Path) -> tuple[str, int]:
    proc = subprocess.run([sys.executable, "-S", str(SHIM_PATH), str(spec_path)], capture_output=True,
                          text=True, timeout=TIMEOUT, start_new_session=True)
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
    (["true"], {"cgroup_procs": ["/nonexistent/cgroup.procs"]}, "error cannot enter cgroup /nonexistent/"),
    (["true"], {"cwd": "/nonexistent-dir"}, "error cannot chdir to /nonexistent-dir: No such file"),
    (["true"], {"stdout": "/nonexistent-dir/out.log"}, "error cannot open the log files"),
])
def test_launch_failures_are_one_error_line(tmp_path: Path, argv: list[str], over: dict[str, Any],
                                            fragment: str) -> None:
    out, rc = run_shim(write_spec(tmp_path, argv, **over))
    assert rc == 0 and out.startswith(fragment) and out.count("\n") == 1
    assert exit_record(tmp_path)["exit_code"] == 127


def test_task_gets_default_signals_and_exact_env(tmp_path: Path) -> None:
    # The shim runs Python (SIGPIPE ignored) from a parent that ignores SIGINT too.
    env = {"PATH": DEFAULT_PATH, "ONLY": "this"}
    spec = write_spec(tmp_path, ["sh", "-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status; env | sort"], env=env)
    subprocess.run([sys.executable, "-c",
                    "import signal,subprocess,sys; signal.signal(signal.SIGINT, signal.SIG_IGN);"
                    "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1]);"
                    f"subprocess.run([sys.executable, '-S', {str(SHIM_PATH)!r}, {str(spec)!r}], timeout={TIMEOUT})"],
                   timeout=TIMEOUT, check=True, capture_output=True)
    lines = (tmp_path / "out.log").read_text().splitlines()
    masks = {x.split(":")[0]: int(x.split()[1], 16) for x in lines if x.startswith("Sig")}
    # Signals 32 and 33 belong to glibc (not settable from Python); the caller's may leak in.
    glibc_internal = (1 << 31) | (1 << 32)
    assert masks["SigBlk"] & ~glibc_internal == 0 and masks["SigIgn"] & ~glibc_internal == 0, masks
    env_lines = [x for x in lines if not x.startswith("Sig")]
    assert sorted(x.split("=")[0] for x in env_lines if x.split("=")[0] not in ("PWD", "SHLVL", "_")) == \
        ["ONLY", "PATH"]


def test_exit_is_recorded_when_the_agent_stopped_listening(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, ["sh", "-c", "sleep 0.2; exit 4"])
    proc = subprocess.Popen([sys.executable, "-S", str(SHIM_PATH), str(spec)], stdout=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout is not None
    proc.stdout.close()                  # the agent died: the shim's line meets EPIPE
    assert proc.wait(TIMEOUT) == 0
    assert exit_record(tmp_path)["exit_code"] == 4


def test_unreadable_spec_is_an_error_line(tmp_path: Path) -> None:
    out, rc = run_shim(tmp_path / "missing.json")
    assert out.startswith("error cannot read the task spec") and rc == 1
