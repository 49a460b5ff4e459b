"""`tcl`: the command-line client. Builds the parser, dispatches, maps errors to exit codes.

Exit codes: 0 ok; 1 the master refused or failed (or a waited-for job did not succeed);
2 usage errors (bad flags, sizes, job files). Expected errors never print a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Sequence, TypeVar

import grpc

from tcluster.cli import commands
from tcluster.cli.login import add_login, login as login_command, login_hint, whoami as whoami_command
from tcluster.cli.queues import add_queues, queues as queues_command
from tcluster.cli.pack import add_pack, run_pack
from tcluster.cli.sim import add_sim, run_sim
from tcluster.cli.top import add_top, top as top_command
from tcluster.cli.client import (
    EXIT_USAGE, MASTER_ENV, MasterClient, check_master_list, default_master, explain_rpc_error,
)
from tcluster.cli.leader import DEFAULT_WAIT_LEADER_S, WAIT_LEADER_ENV
from tcluster.cli.submitflags import DEFAULT_CPU, DEFAULT_MEMORY, add_submit_options, non_negative_int
from tcluster.errors import InvalidArgument
from tcluster.model import JobState
from tcluster.units import parse_bytes, parse_cpu

T = TypeVar("T")
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader (e.g. `head`) went away
OUTPUT_FORMATS = ("table", "json")
JOB_STATE_NAMES = tuple(state.value for state in JobState)


def add_global_options(parser: argparse.ArgumentParser, with_defaults: bool) -> None:
    """--master and -o on the top parser and again on every subcommand.

    Subcommands use SUPPRESS so that an option given after the subcommand overrides the
    top-level one while its absence leaves the top-level value alone.
    """
    master_default = default_master() if with_defaults else argparse.SUPPRESS
    output_default = "table" if with_defaults else argparse.SUPPRESS
    # A string default goes through `type` too: a bad $TCL_WAIT_LEADER_S is a usage error.
    wait_default = (os.environ.get(WAIT_LEADER_ENV) or f"{DEFAULT_WAIT_LEADER_S:g}") if with_defaults \
        else argparse.SUPPRESS
    parser.add_argument(
        "--master", metavar="HOST:PORT[,...]", default=master_default,
        help=f"the tcl-master to talk to, or every master of an HA cluster, comma-separated "
             f"(default: ${MASTER_ENV}, else the last `tcl login`'s, else 127.0.0.1:7070)",
    )
    parser.add_argument(
        "--wait-leader-s", metavar="S", type=non_negative_float, default=wait_default,
        help=f"with several masters, wait this long for one to lead (default: ${WAIT_LEADER_ENV}, else "
             f"{DEFAULT_WAIT_LEADER_S:g})",
    )
    parser.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default=output_default, help="table (default) or json")


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def argument_type(parse: Callable[[str, str], T], what: str) -> Callable[[str], T]:
    """Wrap a tcluster.units parser as an argparse `type` (argparse names the option)."""
    def convert(text: str) -> T:
        try:
            return parse(text, "")
        except InvalidArgument as exc:
            raise argparse.ArgumentTypeError(f"{exc} ({what})") from None
    return convert


def add_submit(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "submit", parents=[common], help="submit a job; prints its id",
        description="Submit a job of N identical tasks. Put `--` before the command.\n"
        f"Each task gets --cpu {DEFAULT_CPU} and --mem {DEFAULT_MEMORY} unless the flags, --resources\n"
        "or the job file say otherwise (0 in a file or --resources counts as unset).\n"
        "Flags override the job file; a job file `command:` given as one string runs\n"
        "through /bin/sh -c, a list runs as is.",
        epilog="examples:\n  tcl submit --cpu 0.5 --mem 256Mi -- python3 train.py\n"
        "  tcl submit --resources 'cpu_num=0.5; memory=0.5GB' --tasks 4 -- ./work.sh\n"
        "  ID=$(tcl submit -f job.yaml) && tcl status $ID",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_submit_options(p)


def add_query_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("jobs", parents=[common], help="list jobs, newest first")
    p.add_argument("--state", action="append", type=str.upper, choices=JOB_STATE_NAMES, help="only jobs in this state (repeatable)")
    p.add_argument("--queue", help="only jobs of this queue")
    p.add_argument("--owner", help="only jobs of this user")
    p.add_argument("--limit", type=non_negative_int, default=0,
                   help="at most N jobs, newest first (default: 100; the master's page size)")
    p.add_argument("-a", "--all", action="store_true", help="every job, not just the newest 100")

    p = sub.add_parser("status", parents=[common], help="a job and its tasks, with usage")
    p.add_argument("job_id", metavar="ID")

    p = sub.add_parser("cancel", parents=[common], help="cancel a job; prints its new state")
    p.add_argument("job_id", metavar="ID")

    p = sub.add_parser("logs", parents=[common], help="print a task's log (stdout by default)")
    p.add_argument("job_id", metavar="ID")
    p.add_argument("--task", type=non_negative_int, default=0, metavar="N", help="task index (default: 0)")
    p.add_argument("--stderr", action="store_true", help="the task's stderr instead of its stdout")
    p.add_argument("--tail", metavar="BYTES", help="only the last BYTES (e.g. 4096 or 64Ki)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new output until the task ends")

    sub.add_parser("nodes", parents=[common], help="list nodes with capacity, use and free resources")


def add_dev(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("dev", parents=[common], help="run a master and a local agent in one process (for trying tcluster)")
    p.add_argument("--data-dir", default="./.tcluster", metavar="DIR", help="state directory (default: ./.tcluster)")
    p.add_argument("--listen", default="127.0.0.1:7070", metavar="HOST:PORT", help="master address (default: 127.0.0.1:7070)")
    p.add_argument("--runtime", choices=("auto", "cgroup2", "cgroup1", "process"), default="auto", help="container runtime (default: auto)")
    p.add_argument("--cpus", type=argument_type(parse_cpu, "cores, e.g. 2 or 500m"), help="CPU capacity to offer (default: detected)")
    p.add_argument("--memory", type=argument_type(parse_bytes, "a size, e.g. 4Gi"), help="memory to offer (default: detected)")
    p.add_argument("--node", metavar="NAME", help="node name (default: chosen by dev mode)")
    p.add_argument("--http", metavar="HOST:PORT", help="dashboard address (default: 127.0.0.1:7080; `off` for none)")
    p.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), type=str.upper, default="WARNING",
                   help="daemon log level (default: WARNING)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tcl", description="tcluster command-line client")
    add_global_options(parser, with_defaults=True)
    common = argparse.ArgumentParser(add_help=False)
    add_global_options(common, with_defaults=False)
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND", required=True)
    add_submit(sub, common)
    add_query_commands(sub, common)
    add_dev(sub, common)
    add_queues(sub, common)
    add_sim(sub, common)
    add_pack(sub, common)
    add_top(sub, common)
    add_login(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse already printed usage or help
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return run(args)


def run(args: argparse.Namespace) -> int:
    client: MasterClient | None = None
    try:
        if args.command_name == "dev":
            return commands.dev(args)
        if args.command_name == "sim":   # local: no master
            return run_sim(args)
        if args.command_name == "pack":   # local; --from-master only reads
            return run_pack(args)
        if args.command_name == "login":  # its own credentials, not the stored ones
            return login_command(args)
        handler = {**commands.MASTER_COMMANDS, "queues": queues_command, "top": top_command,
                   "whoami": whoami_command}[args.command_name]
        client = MasterClient(check_master_list(args.master), wait_leader_s=args.wait_leader_s)
        with client:
            return handler(args, client)
    except InvalidArgument as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except grpc.RpcError as exc:
        master = client.address if client is not None else args.master   # the one that answered
        exit_code, message = explain_rpc_error(exc, master)
        print(message, file=sys.stderr)
        if hint := login_hint(exc, args.master):
            print(hint, file=sys.stderr)
        return exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        silence_stdout()
        return EXIT_BROKEN_PIPE


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # stdout is not a real file (e.g. captured in tests): nothing to protect


if __name__ == "__main__":
    sys.exit(main())
