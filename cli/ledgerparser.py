"""`tcl report` and `tcl history`'s parsers (README, "Usage ledger"): plain values only, so
building them imports no grpc (cli/main.py). Their `-o` also takes csv."""

from __future__ import annotations

import argparse
from typing import Any, Callable

LEDGER_FORMATS = ("table", "json", "csv")
STATES = ("SUCCEEDED", "FAILED", "KILLED", "LOST", "PREEMPTED", "REQUEUED")
TIME_HELP = "2026-11-01, 2026-11-01T08:00, now, now-7days, now-2hours, today, yesterday (local time) or unix seconds"


def add_ledger_commands(sub: Any, add_globals: Callable[[argparse.ArgumentParser, tuple[str, ...]], None]) -> None:
    """`add_globals(parser, formats)` gives a parser --master, -o ... (cli/main.py's)."""
    p = sub.add_parser(
        "report", help="usage over a period: CPU-hours, GPU-hours, jobs, failures by user, queue or job",
        description="Sums of the usage ledger (every finished attempt, kept --ledger-retention) over\n"
                    "[--since, --until), like Slurm's sreport. A user sees their own usage, an admin everyone's.",
        epilog="example:\n  tcl report --since 2026-11-01 --until 2026-12-01 --by queue\n"
               "  tcl report --since now-7days --by user -o csv",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    if isinstance(p, argparse.ArgumentParser):
        add_globals(p, LEDGER_FORMATS)
    p.add_argument("--since", required=True, metavar="T", help=f"from this time: {TIME_HELP}")
    p.add_argument("--until", metavar="T", default="now", help="to this time (default now)")
    p.add_argument("--by", choices=("user", "queue", "job"), default="user", help="one line per (default user)")

    p = sub.add_parser(
        "history", help="finished attempts, newest first (like Slurm's sacct)",
        description="The usage ledger's rows: one per finished attempt of a task, with its usage,\n"
                    "exit code and reason, kept --ledger-retention. A user sees their own, an admin everyone's.",
        epilog="example:\n  tcl history --since now-1day --state FAILED\n  tcl history --user alice -o json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    if isinstance(p, argparse.ArgumentParser):
        add_globals(p, LEDGER_FORMATS)
    p.add_argument("--user", default="", help="only this user's attempts (an admin's choice; default: all you see)")
    p.add_argument("--since", metavar="T", default="now-1day", help=f"from this time (default now-1day): {TIME_HELP}")
    p.add_argument("--until", metavar="T", default="now", help="to this time (default now)")
    p.add_argument("--state", action="append", type=str.upper, choices=STATES, help="only attempts that ended so "
                   "(repeatable)")
    p.add_argument("--limit", type=int, default=1000, metavar="N", help="at most N rows (default %(default)s)")
