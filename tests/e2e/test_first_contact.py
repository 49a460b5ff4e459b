"""First contact through the binaries (issue 37): a port already taken (here by a running
tcl-master, whose grpc server allows SO_REUSEPORT sharing) stops a second tcl-master and a
tcl-gm with one line and exit 1, not a traceback; `--log-format json` writes JSON lines;
under journald each line carries its syslog priority and no timestamp."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from testkit.procs import BIN, Proc, start_master

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proc, str, Path]]:
    tmp = tmp_path_factory.mktemp("first-contact")
    master, address = start_master(tmp, "--insecure", "--log-format", "json", "--http", "off")
    yield master, address, tmp
    master.stop()


def _start(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("daemon", ["tcl-master", "tcl-gm"])
def test_a_busy_port_is_one_line_and_exit_1(running: tuple[Proc, str, Path], daemon: str) -> None:
    _, address, tmp = running
    extra = (["--data-dir", str(tmp / "second"), "--insecure", "--http", "off"] if daemon == "tcl-master" else
             ["--state-dir", str(tmp / "gm"), "--lms", "lm0=127.0.0.1:1", "--queue-map", "a=gm0"])
    done = _start([str(BIN / daemon), "--listen", address, *extra])
    port = address.rpartition(":")[2]
    assert done.returncode == 1, done
    assert done.stderr.strip().splitlines() == [
        f"{daemon}: cannot listen on {address} (--listen): port {port} is already in use "
        f"(see who holds it: ss -ltnp 'sport = :{port}'); choose another with --listen"], done.stderr


def test_json_log_lines_parse(running: tuple[Proc, str, Path]) -> None:
    master, _, _ = running
    records = [json.loads(line) for line in master.output().splitlines() if line.startswith("{")]
    assert records, master.output()
    assert all({"ts", "level", "logger", "msg"} <= set(r) for r in records)
    assert any(r["logger"].startswith("tcluster.master") and r["level"] == "INFO" for r in records)


def test_a_bad_log_level_is_one_clear_error(tmp_path: Path) -> None:
    config = tmp_path / "master.toml"
    config.write_text('log_level = "loud"\n')
    done = _start([str(BIN / "tcl-master"), "--config", str(config), "--data-dir", str(tmp_path)])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"tcl-master: {config}:1: log_level: 'loud' is not a string (LEVEL) "
        "(unknown log level 'loud'; choose one of: DEBUG, INFO, WARNING, ERROR)"]


def test_under_journald_lines_carry_priorities_and_no_timestamp(tmp_path: Path) -> None:
    """systemd's JOURNAL_STREAM names stderr's device:inode; here a file stands in for the
    journal's socket, so the binary sees what it sees under a unit."""
    log = tmp_path / "gm.log"
    log.touch()
    stat = os.stat(log)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gm = Proc([str(BIN / "tcl-gm"), "--listen", f"127.0.0.1:{port}", "--state-dir", str(tmp_path / "state"),
               "--lms", "lm0=127.0.0.1:1", "--queue-map", "a=gm0", "--log-level", "debug"], log,
              env={"JOURNAL_STREAM": f"{stat.st_dev}:{stat.st_ino}"})
    try:
        gm.wait_for_output(r"serving on port")
    finally:
        gm.stop()
    lines = [line for line in gm.output().splitlines() if line.startswith("<")]
    assert any(re.fullmatch(r"<6>tcluster\.gm: tcl-gm gm0 serving on port \d+", line) for line in lines), lines
    assert any(line.startswith("<7>") for line in lines)              # --log-level debug: priority 7
    assert not any(re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", line) for line in lines)   # journald stamps the time
