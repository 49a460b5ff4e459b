"""First contact through the binaries (issue 37): a port already taken (here by a running
tcl-master, whose grpc server allows SO_REUSEPORT sharing) stops a second tcl-master and a
tcl-gm with one line and exit 1, not a traceback; `--log-format json` writes JSON lines."""

from __future__ import annotations

import json
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
