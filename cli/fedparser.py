"""`tcl --federation GM,...`: the parser side of Megha's federation commands (README,
"Megha"). With --federation (or $TCL_FEDERATION) `submit`, `status`, `cancel` go to the
global managers (tcl-gm) instead of a master, and `list` and `federation status` exist
only there. Plain values only: importable without grpc (cli/main.py)."""

from __future__ import annotations

import argparse
import os
from typing import Any

FEDERATION_ENV = "TCL_FEDERATION"
FEDERATION_TLS_ENV = "TCL_FEDERATION_TLS"
# Command -> "module:function", called as handler(args, client) with a GMClient.
FEDERATION_COMMANDS = {
    "submit": "tcluster.cli.federation:submit", "status": "tcluster.cli.federation:status",
    "cancel": "tcluster.cli.federation:cancel", "list": "tcluster.cli.federation:list_jobs",
    "federation": "tcluster.cli.federation:federation_status",
}
ONLY_FEDERATED = ("list", "federation")
LIST_PAGE_MAX = 1000      # tcl-gm's most jobs in one List answer


def add_federation_option(parser: argparse.ArgumentParser, with_defaults: bool) -> None:
    default = os.environ.get(FEDERATION_ENV, "") if with_defaults else argparse.SUPPRESS
    parser.add_argument(
        "--federation", metavar="GM:PORT[,...]", default=default,
        help=f"talk to these federation global managers (tcl-gm), tried in turn, instead of a master: "
             f"submit, status, cancel, list, federation status (default: ${FEDERATION_ENV})")
    parser.add_argument(
        "--federation-tls", metavar="DIR",
        default=os.environ.get(FEDERATION_TLS_ENV, "") if with_defaults else argparse.SUPPRESS,
        help="talk TLS to the global managers: DIR/ca.pem verifies them (tcl-gm --tls-cert), and "
             "DIR/cert.pem + DIR/key.pem, where present, are this user's certificate for a GM with "
             f"--client-ca (default: ${FEDERATION_TLS_ENV}; none: plaintext)")


def page_limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= LIST_PAGE_MAX:
        raise argparse.ArgumentTypeError(f"{value} is not in 1..{LIST_PAGE_MAX}")
    return value


def add_federation(sub: Any, common: argparse.ArgumentParser) -> None:
    """sub: cli/main.py's _Subcommands (the options are built only when the command runs)."""
    p = sub.add_parser("list", parents=[common], help="federated jobs, newest first (with --federation)",
                       description="The jobs of every global manager named by --federation, newest first.")
    p.add_argument("--queue", help="only jobs of this queue")
    p.add_argument("--limit", type=page_limit, default=100, metavar="N",
                   help=f"the newest N jobs (1..{LIST_PAGE_MAX}, default 100; the GMs' page size)")
    p.add_argument("-a", "--all", action="store_true", help="every job: page through each GM's history")
    p = sub.add_parser(
        "federation", parents=[common], help="the federation's global and local managers (with --federation)",
        description="`tcl federation status`: each global manager named by --federation (alive, its queues,\n"
        "pending tasks, launches, repartitions, inconsistencies) and each LM as that GM sees it\n"
        "(epoch, nodes, nodes per GM partition, age of its view, connected, free resources).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("status",), help="status")


__all__ = ["FEDERATION_COMMANDS", "FEDERATION_ENV", "FEDERATION_TLS_ENV", "ONLY_FEDERATED", "add_federation", "add_federation_option"]
