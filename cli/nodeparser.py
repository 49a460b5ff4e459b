"""`tcl node cordon|uncordon|drain|maint`'s parser and its time arguments (durations as
--time-limit takes them: 90s, 5m, 1h30m, 2d, 1-00:00:00; start times as now, +30m, an ISO 8601 time or unix seconds). Plain
values only: importable without grpc, so `tcl node --help` stays fast (cli/main.py)."""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from typing import Any, Callable

from tcluster.domain import units
from tcluster.domain.errors import InvalidArgument

def parse_duration(text: str) -> float:
    """Seconds (> 0) in the syntax --time-limit takes (tcluster.domain.units: 90, 5m, 1h30m, 2d,
    Slurm's 1-00:00:00)."""
    try:
        seconds = units.parse_duration(text)
    except InvalidArgument as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a duration > 0 ({units.DURATION_HINT})")
    return seconds


def parse_start(text: str, now: Callable[[], float] = time.time) -> float:
    """'now', '+30m' (from now), '2026-11-27T02:00' (local time unless it names a zone,
    e.g. Z or +01:00) or unix seconds -> unix seconds."""
    value = text.strip()
    if value.lower() == "now":
        return now()
    if value.startswith("+"):
        return now() + parse_duration(value[1:])
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: use now, +30m, 2026-11-27T02:00 or "
                                         "unix seconds") from None


def add_node(sub: Any, common: argparse.ArgumentParser) -> None:
    """sub: cli/main.py's _Subcommands (the options are built only when `node` runs)."""
    p = sub.add_parser(
        "node", parents=[common], help="cordon, drain or schedule maintenance of nodes (admins)",
        description="Take nodes out of service and back (docs/node-operations.md). Admins only.\n"
        "  cordon    no new tasks start there; running ones go on\n"
        "  uncordon  READY again: lifts a cordon, cancels a drain, drops a maintenance window\n"
        "  drain     cordon, then wait for the tasks to end; at --deadline what still runs is\n"
        "            stopped (SIGTERM, the preemption grace, SIGKILL) and requeued elsewhere,\n"
        "            without using a retry\n"
        "  maint     a maintenance window: nothing starts there that could still run when it\n"
        "            opens (a job without a time limit: nothing until it is over)\n"
        "  forget    an unreachable node's machine is dead: what ran there is lost now, and a\n"
        "            stop it never confirmed is taken as done (a job without --retries waits\n"
        "            for that: its copy might still run)",
        epilog="examples:\n  tcl node drain n1 n2 --deadline 1h --reason 'kernel 6.8' --monitor\n"
        "  tcl node maint n3 --start 2026-11-27T02:00 --duration 2h --reason 'UPS swap'\n"
        "  tcl node uncordon n1 n2",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if not isinstance(p, argparse.ArgumentParser):    # another command runs: `node`'s options are not built
        return
    ops = p.add_subparsers(dest="node_op", metavar="OP", required=True)
    for name, text in (("cordon", "no new tasks on these nodes"), ("uncordon", "back to READY"),
                       ("drain", "cordon, let tasks end, requeue the rest at the deadline"),
                       ("maint", "schedule a maintenance window"),
                       ("forget", "declare unreachable nodes dead: their tasks are lost now")):
        op = ops.add_parser(name, parents=[common], help=text, description=text)
        op.add_argument("nodes", nargs="+", metavar="NODE")
        op.add_argument("--reason", default="", help="why (shown in `tcl nodes`, with who and when)")
        if name == "drain":
            op.add_argument("--deadline", type=parse_duration, default=0.0, metavar="D",
                            help="then requeue what still runs, e.g. 30m or 1h (default: none, wait for ever)")
            op.add_argument("--monitor", action="store_true",
                            help="print what still blocks the drain, and why, until the nodes are DRAINED "
                            "(Ctrl-C stops monitoring, not the drain)")
        if name == "maint":
            op.add_argument("--start", type=parse_start, required=True, metavar="T",
                            help="now, +30m, 2026-11-27T02:00 (local time unless it names a zone) or unix seconds")
            op.add_argument("--duration", type=parse_duration, required=True, metavar="D", help="e.g. 2h")


__all__ = ["add_node", "parse_duration", "parse_start"]
