"""The parsers of `tcl exec` and `tcl run` (cli/execcmd.py, cli/runcmd.py): built without
importing the commands or the wire code, as every parser is (tests/unit/test_cli_imports.py)."""

from __future__ import annotations

import argparse
from typing import Any


def add_exec_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "exec", parents=[common], help="run a command inside a running task (its container, user and directory)",
        description="Run CMD inside a running task's container: its cgroup, namespaces, user, working\n"
        "directory and environment. The job's owner or an admin only. tcl's exit code is CMD's.",
        epilog="examples:\n  tcl exec 3f2a9c1e -- ps aux\n  tcl exec 3f2a9c1e.4 -it -- bash",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="JOB[.TASK]", help="the job, and its task index (default 0)")
    add_stdio_flags(p)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command and its arguments")


def add_stdio_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--stdin", action="store_true", help="pass this terminal's stdin to the command")
    p.add_argument("-t", "--tty", action="store_true",
                   help="a pseudo-terminal for the command (with -i: an interactive shell; stderr joins stdout)")


def add_run_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "run", parents=[common], help="submit a one-task job and attach to it (like srun --pty)",
        description="Submit a one-task job running CMD and attach this terminal to it: waits for it to start\n"
        "(progress on stderr), then relays stdio as `tcl exec` does. Exits with the task's exit code.\n"
        "Ctrl-C while waiting (or without -t) cancels the job; under -t it goes to the remote terminal.",
        epilog="examples:\n  tcl run --cpu 2 --mem 4G -it -- bash\n  tcl run -- hostname",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    if isinstance(p, argparse.ArgumentParser):
        from tcluster.cli.submitflags import add_submit_options
        add_stdio_flags(p)
        add_submit_options(p)
