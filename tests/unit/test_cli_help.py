"""`tcl --help` and every `tcl CMD --help`, word for word as the a8f7959 parser printed
them (tests/unit/cli_help/): building the parser without importing the commands
(cli/main.py) must not change what a user reads.

argparse lays help out differently across Python versions; the snapshots are Python
3.11's. Regenerate them, after a deliberate change, with
`.venv/bin/python -m tests.unit.test_cli_help`."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

import pytest

from tcluster.cli.main import main

SNAPSHOTS = Path(__file__).with_name("cli_help")
COMMANDS = ("", "submit", "jobs", "status", "cancel", "logs", "nodes", "dev", "queues", "sim", "pack", "top",
            "login", "whoami", "node", "list", "federation", "report", "history", "exec", "run")
SNAPSHOT_PYTHON = (3, 11)
# Fixed width, and no environment that argparse would print as a default.
HELP_ENV = {"COLUMNS": "100", "LINES": "40"}
UNSET = ("TCL_MASTER", "TCL_WAIT_LEADER_S", "TCL_FEDERATION")


def snapshot_path(command: str) -> Path:
    return SNAPSHOTS / (f"tcl-{command}.txt" if command else "tcl.txt")


def help_text(command: str) -> tuple[int, str]:
    """(exit code, stdout) of `tcl [COMMAND] --help`."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([command, "--help"] if command else ["--help"])
    return code, out.getvalue()


@pytest.mark.skipif(sys.version_info[:2] != SNAPSHOT_PYTHON, reason="help snapshots are Python 3.11's argparse layout")
@pytest.mark.parametrize("command", COMMANDS)
def test_help_is_unchanged(command: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))   # no stored login to name a default master
    for key, value in HELP_ENV.items():
        monkeypatch.setenv(key, value)
    for key in UNSET:
        monkeypatch.delenv(key, raising=False)
    code, text = help_text(command)
    assert code == 0
    assert text == snapshot_path(command).read_text()


def write_snapshots() -> None:
    os.environ.update(HELP_ENV)
    for key in UNSET:
        os.environ.pop(key, None)
    SNAPSHOTS.mkdir(exist_ok=True)
    for command in COMMANDS:
        snapshot_path(command).write_text(help_text(command)[1])


if __name__ == "__main__":
    write_snapshots()
