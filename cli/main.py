"""`tcl`: the command-line client. Builds the parser, dispatches, maps errors to exit codes.

Exit codes: 0 ok; 1 the master refused or failed (or a waited-for job did not succeed);
2 usage errors (bad flags, sizes, job files). Expected errors never print a traceback.

Every subcommand's parser is built here from plain values (cli/options.py), and a command's
module is imported only when that command runs (MASTER_COMMANDS, LOCAL_COMMANDS): grpc,
protobuf, YAML, numpy and the scheduler load only for the commands that use them, so
`tcl --help` and `tcl status` start fast (tests/unit/test_cli_imports.py keeps it so;
bench/cli_startup.py measures it).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from tcluster.cli.credentials import MASTER_ENV, default_master
from tcluster.cli.doctorparser import add_doctor
from tcluster.cli.fedparser import FEDERATION_COMMANDS, ONLY_FEDERATED, add_federation, add_federation_option
from tcluster.cli.ledgerparser import add_ledger_commands
from tcluster.cli.lifecycleparser import LIFECYCLE_COMMANDS, add_cancel, add_lifecycle_commands, add_update
from tcluster.cli.nodeparser import add_node
from tcluster.cli.options import (
    DEFAULT_CPU, DEFAULT_MEMORY, DEFAULT_WAIT_LEADER_S, EXIT_FAILURE, EXIT_USAGE, PACK_ORDERS, WAIT_LEADER_ENV,
    non_negative_int,
)
from tcluster.domain.errors import InvalidArgument, Unavailable
from tcluster.domain.states import JobState
from tcluster.domain.units import parse_bytes, parse_cpu
from tcluster.version import add_version_flag

if TYPE_CHECKING:   # names for the annotations only: importing them at run time loads grpc
    import grpc

    from tcluster.cli.client import MasterClient

T = TypeVar("T")
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader (e.g. `head`) went away
OUTPUT_FORMATS = ("table", "json")
JOB_STATE_NAMES = tuple(state.value for state in JobState)
DEFAULT_FAIRNESS = "mch"   # `tcl sim --fairness`

# Command -> "module:function", imported when the command runs. Those that talk to a
# master are called as handler(args, client) inside one MasterClient; the others (local,
# or with credentials of their own) as handler(args).
MASTER_COMMANDS = {
    "submit": "tcluster.cli.commands:submit", "jobs": "tcluster.cli.commands:jobs",
    "status": "tcluster.cli.commands:status", "cancel": "tcluster.cli.lifecycle:cancel",
    "logs": "tcluster.cli.commands:logs", "nodes": "tcluster.cli.commands:nodes",
    "queues": "tcluster.cli.queuetree:queues", "top": "tcluster.cli.top:top", "whoami": "tcluster.cli.login:whoami",
    "why": "tcluster.cli.why:why", "update": "tcluster.cli.lifecycle:update", "node": "tcluster.cli.nodecmd:node",
    "report": "tcluster.cli.ledger:report", "history": "tcluster.cli.ledger:history",
    **LIFECYCLE_COMMANDS,
    "exec": "tcluster.cli.execcmd:exec_cmd", "run": "tcluster.cli.runcmd:run_cmd",
}
LOCAL_COMMANDS = {
    "dev": "tcluster.cli.commands:dev", "sim": "tcluster.cli.sim:run_sim", "pack": "tcluster.cli.pack:run_pack",
    "login": "tcluster.cli.login:login", "doctor": "tcluster.cli.doctor:doctor",
    "completion": "tcluster.cli.completion:completion",
}


def add_global_options(parser: argparse.ArgumentParser, with_defaults: bool,
                       formats: tuple[str, ...] = OUTPUT_FORMATS) -> None:
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
    parser.add_argument("-o", "--output", choices=formats, default=output_default,
                        help="table (default) or json" if formats == OUTPUT_FORMATS else
                        f"{', '.join(formats[:-1])} or {formats[-1]} (default table)")
    add_federation_option(parser, with_defaults)


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def argument_type(parse: Callable[[str, str], T], what: str) -> Callable[[str], T]:
    """Wrap a tcluster.domain.units parser as an argparse `type` (argparse names the option)."""
    def convert(text: str) -> T:
        try:
            return parse(text, "")
        except InvalidArgument as exc:
            raise argparse.ArgumentTypeError(f"{exc} ({what})") from None
    return convert


def add_submit(sub: _Subcommands, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "submit", parents=[common], help="submit a job; prints its id",
        description="Submit a job of N identical tasks. Put `--` before the command.\n"
        f"Each task gets --cpu {DEFAULT_CPU} and --mem {DEFAULT_MEMORY} unless the flags, --resources\n"
        "or the job file say otherwise (0 in a file or --resources counts as unset,\n"
        "but memory 0 is refused: no limit is `unlimited`).\n"
        "Flags override the job file; a job file `command:` given as one string runs\n"
        "through /bin/sh -c, a list runs as is. Without `--`, a first word that is a file\n"
        "here is a job script: its #TCL and #SBATCH lines are read as flags (flags given\n"
        "here win). Units are Slurm's: --mem 4096 is MiB, --time-limit 90 minutes. Each\n"
        "task starts in this directory (--workdir to choose another) with this shell's\n"
        "variables (--export).",
        epilog="examples:\n  tcl submit --cpu 0.5 --mem 256Mi -- python3 train.py\n"
        "  tcl submit --mem 4096 --time-limit 1:30:00 -- ./run.sh     # 4 GiB, 90 minutes, here\n"
        "  tcl submit --resources 'cpu_num=0.5; memory=0.5GB' --tasks 4 -- ./work.sh\n"
        "  ID=$(tcl submit -f job.yaml) && tcl status $ID\n"
        "  tcl submit --stdout-file out-%j-%t.txt run.sh   # a script with #TCL/#SBATCH lines",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if isinstance(p, argparse.ArgumentParser):     # the field table loads only for a submit
        from tcluster.cli.submitflags import add_submit_options
        add_submit_options(p)


def add_query_commands(sub: _Subcommands, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("jobs", parents=[common], help="list jobs, newest first")
    p.add_argument("--state", action="append", type=str.upper, choices=JOB_STATE_NAMES, help="only jobs in this state (repeatable)")
    p.add_argument("--queue", help="only jobs of this queue")
    p.add_argument("--owner", help="only jobs of this user")
    p.add_argument("--all-users", action="store_true",
                   help="every user's jobs that you may see (default: only your own)")
    p.add_argument("--limit", type=non_negative_int, default=0,
                   help="at most N jobs, newest first (default: 100; the master's page size)")
    p.add_argument("-a", "--all", action="store_true", help="every job, not just the newest 100")

    p = sub.add_parser("status", parents=[common], help="a job and its tasks, with usage")
    p.add_argument("job_id", metavar="ID")
    p.add_argument("--all-tasks", action="store_true",
                   help="every task row of a big job (else over 1,000 rows: unfinished first, the rest as index ranges)")

    p = sub.add_parser(
        "why", parents=[common], help="why a job waits (its queue's share, preemption) and why it was preempted",
        description="What keeps a job's tasks waiting (placement, then preemption: which queue is below its\n"
        "share, when a reclaim starts, what blocks it), its queue's share against its guarantee, the\n"
        "queues above theirs, and for each preempted task who preempted it and why.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job_id", metavar="ID")

    add_cancel(sub, common)
    add_update(sub, common)
    add_lifecycle_commands(sub, common)

    p = sub.add_parser("logs", parents=[common], help="print a task's log (stdout by default)")
    p.add_argument("job_id", metavar="ID")
    p.add_argument("--task", type=non_negative_int, default=0, metavar="N", help="task index (default: 0)")
    p.add_argument("--stderr", action="store_true", help="the task's stderr instead of its stdout")
    p.add_argument("--tail", metavar="BYTES", help="only the last BYTES (e.g. 4096 or 64Ki)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new output until the task ends")
    p.add_argument("--attempt", type=non_negative_int, default=0, metavar="N",
                   help="an earlier attempt's log (a requeued, retried or preempted task; default: the latest)")

    sub.add_parser("nodes", parents=[common], help="list nodes with capacity, use and free resources")


def add_dev(sub: _Subcommands, common: argparse.ArgumentParser) -> None:
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


def add_queues(sub: _Subcommands, common: argparse.ArgumentParser) -> None:
    sub.add_parser(
        "queues", parents=[common], help="the queue tree: weights, guaranteed and current shares",
        description="GUARANTEED is the share a queue gets when every queue is busy (weight over its\n"
        "siblings' weights, multiplied down the tree). SHARE is the dominant share its running\n"
        "tasks hold now, of the READY nodes' total. RUNNING and PENDING count tasks (jobs).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_sim(sub: _Subcommands, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "sim", parents=[common], help="simulate a scenario with the master's own policies",
        description="Discrete-event simulation of a scenario (nodes, queues, jobs) with the master's\n"
        "fairness and placement policies. Prints each job's state at the end of the run.",
        epilog="example:\n  tcl sim examples/mch-figure4.yaml --until 500 -o json\n"
        "  tcl sim examples/mch-figure4.yaml --timeline f4.csv --plot f4.png\n"
        "  tcl sim examples/tcluster-table3.yaml --fairness fifo --placement lotes --lotes-classes classes.yaml\n"
        "  tcl sim examples/preemption-departments.yaml --preempt-compare --plot shares.png\n"
        "  tcl sim examples/backfill-gangs.yaml --backfill-compare\n"
        "a scenario with a `workload:` (generated arrivals) compares placement policies by response time:\n"
        "  tcl sim examples/lotes-generated.yaml --compare lotes,tetris,greedy,first-fit-central --seeds 5\n"
        "a scenario with a `federation:` runs Megha, centralized Megha and Sparrow (allocation times):\n"
        "  tcl sim examples/megha-federation.yaml --compare megha,sparrow --plot megha-cdf.png",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", metavar="SCENARIO.yaml")
    p.add_argument("--fairness", default=DEFAULT_FAIRNESS, help="fifo, drf, hdrf or mch (default %(default)s)")
    p.add_argument("--placement", help="a placement policy of the master (default: the master's default)")
    p.add_argument("--until", type=float, metavar="T", help="stop at T seconds (default: when no events remain)")
    p.add_argument("--seed", type=int, default=0, help="for randomized placement (default 0)")
    p.add_argument("--timeline", metavar="FILE.csv", help="write each job's dominant share over time")
    p.add_argument("--plot", metavar="FILE.png", help="draw the timeline (needs matplotlib)")
    p.add_argument("--lotes-classes", metavar="FILE", help="LoTES job classes (default: k-means over the scenario's jobs)")
    p.add_argument("--lotes-k", type=int, default=4, metavar="K", help="classes to learn when no file is given (default 4)")
    p.add_argument("--lotes-config-label", metavar="LABEL", help="group machines by this node label (default: by capacity)")
    p.add_argument("--compare", metavar="P1,P2", help="workload scenarios: placement policies side by side "
                   "(default lotes,tetris,greedy,first-fit-central); federation scenarios: systems "
                   "(megha,centralized,sparrow)")
    p.add_argument("--seeds", type=int, default=3, metavar="N", help="workload scenarios: seeds --seed .. --seed+N-1 (default 3)")
    p.add_argument("--load", metavar="RHO,..", help="workload scenarios: loads relative to lambda* (default: the file's)")
    add_sim_preemption(p)
    backfill = p.add_mutually_exclusive_group()
    backfill.add_argument("--no-backfill", action="store_true", help="as tcl-master --no-backfill, whatever the scenario says")
    backfill.add_argument("--backfill-compare", action="store_true",
                          help="the scenario without and with backfill: utilization, wait p50/p99, reserved jobs' wait")


def add_sim_preemption(p: argparse.ArgumentParser) -> None:
    """The knobs default to the scenario's `preemption:` mapping, else to tcl-master's defaults."""
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--preemption", action="store_true", help="preempt as tcl-master --preemption does")
    mode.add_argument("--preempt-naive", action="store_true",
                      help="the naive policy: preempt on any share deficit, no victim floor, no final-share rule")
    mode.add_argument("--preempt-compare", action="store_true",
                      help="no preemption, preemption and naive side by side: time to share, preemptions, work lost")
    p.add_argument("--preempt-after-s", type=float, metavar="S", help="a queue below its target this long reclaims (30)")
    p.add_argument("--preempt-grace-s", type=float, metavar="S", help="a victim holds its room this long (30)")
    p.add_argument("--preempt-min-runtime-s", type=float, metavar="S", help="a younger task is no victim (60)")
    p.add_argument("--preempt-max-per-round", type=int, metavar="N", help="victims per round (10)")


def add_pack(sub: _Subcommands, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "pack", parents=[common], help="packing quality of placement policies (Verma et al.'s metrics)",
        description="Packs a workload from scratch with each placement policy and reports the four metrics of\n"
        "Verma, Korupolu and Wilkes: aggregate utilization, hole filling (units as a fraction of the median\n"
        "machine), workload inflation (horizontal/vertical, all/conforming, and Monte Carlo) and cluster\n"
        "compaction (90th percentile of --trials binary searches over random machine prefixes).\n"
        "Lower compaction is better; higher inflation factor and hole filling are better.",
        epilog="examples:\n  tcl pack --generate 1000 --placement first-fit,best-fit,tetris,lotes\n"
        "  tcl pack SCENARIO.yaml --order sum -o json\n  tcl pack --from-master --metrics util,holes",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", nargs="?", metavar="SCENARIO.yaml", help="nodes and jobs in the `tcl sim` format")
    p.add_argument("--from-master", action="store_true", help="the live cluster's nodes and its pending and running jobs")
    p.add_argument("--generate", type=int, metavar="MACHINES", help="a generated heterogeneous cluster and workload")
    p.add_argument("--load", type=float, default=0.6, help="--generate: cpu requested / capacity (default 0.6)")
    p.add_argument("--placement", help="policies, comma-separated (default: all of the master's)")
    p.add_argument("--order", default="arrival", help=f"job order: {', '.join(PACK_ORDERS)} (default arrival)")
    p.add_argument("--metrics", default="util,holes,inflation,mc,compaction", help="which metrics (default: all)")
    p.add_argument("--tau", type=float, default=0.004, help="pending-task threshold (default 0.004, the paper's 0.4%%)")
    p.add_argument("--trials", type=int, default=11, help="compaction trials (default 11)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", metavar="FILE.png", help="hole filling and inflation curves per policy (needs matplotlib)")


def add_top(sub: _Subcommands, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("top", parents=[common], help="live CPU, memory and GPU use of tasks (or nodes, queues)",
                       description="Live usage against requests, refreshed every --interval seconds.\n"
                       "MEM is the working set (usage minus page cache). Where a task holds GPUs:\n"
                       "GPUS its node's device indices, GPU% their mean utilization, GPU MEM the\n"
                       "memory used on them (NVML; '-' where the node reads none).",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    view = p.add_mutually_exclusive_group()
    view.add_argument("--nodes", action="store_true", help="per node: used vs allocated vs capacity")
    view.add_argument("--queues", action="store_true", help="per queue: share and usage")
    p.add_argument("--sort", choices=("cpu", "memory", "gpu"), default="cpu",
                   help="sort by (default: cpu; gpu: utilization of tasks, devices allocated of nodes and queues)")
    p.add_argument("--interval", type=float, default=2.0, metavar="S", help="seconds between refreshes (default 2)")
    p.add_argument("--limit", type=int, default=0, metavar="N", help="at most N rows (default: what fits)")
    p.add_argument("--once", action="store_true", help="draw one screen and exit")


def add_login(sub: _Subcommands, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("login", parents=[common], help="check a user token with the master and store it",
                       description="Verifies the master with the cluster CA (pinned in the token, or --ca), checks\n"
                       "the token, and stores master, CA and token in ~/.config/tcluster/credentials.json\n"
                       "(0600; $XDG_CONFIG_HOME is honoured). The token is read from stdin unless --token.",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--token", metavar="T", help="the token `tcl-master user add` printed (default: read stdin)")
    p.add_argument("--ca", metavar="FILE", type=Path, help="the cluster CA (PEM) instead of the token's pin")
    sub.add_parser("whoami", parents=[common], help="who the master takes you to be, and what you may do")


class _Unused:
    """Stands for the options of a subcommand this run does not use: takes them, keeps none."""

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        pass

    def add_mutually_exclusive_group(self, **kwargs: Any) -> _Unused:
        return self


class _Subcommands:
    """Registers every subcommand (its name and help: what `tcl --help` lists and argparse
    checks a command against), but builds the options of only those named in the command
    line: building all thirteen was most of the parser's cost, and a run uses one."""

    def __init__(self, sub: argparse._SubParsersAction, wanted: frozenset[str] | None) -> None:
        self.sub, self.wanted = sub, wanted

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser | _Unused:
        if self.wanted is None or name in self.wanted:
            return self.sub.add_parser(name, **kwargs)
        self.sub.add_parser(name, help=kwargs.get("help"), add_help=False)
        return _Unused()


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """argv: the command line it will parse, so that only its subcommand is built (every
    subcommand when None)."""
    parser = argparse.ArgumentParser(prog="tcl", description="tcluster command-line client")
    add_global_options(parser, with_defaults=True)
    add_version_flag(parser)
    common = argparse.ArgumentParser(add_help=False)
    add_global_options(common, with_defaults=False)
    wanted = None if argv is None else frozenset(argv) & (MASTER_COMMANDS.keys() | LOCAL_COMMANDS.keys()
                                                          | FEDERATION_COMMANDS.keys())
    sub = _Subcommands(parser.add_subparsers(dest="command_name", metavar="COMMAND", required=True), wanted)
    add_submit(sub, common)
    add_query_commands(sub, common)
    add_dev(sub, common)
    add_queues(sub, common)
    add_sim(sub, common)
    add_pack(sub, common)
    add_top(sub, common)
    add_login(sub, common)
    add_node(sub, common)
    add_doctor(sub, common)
    add_federation(sub, common)
    add_ledger_commands(sub, lambda p, formats: add_global_options(p, False, formats))
    from tcluster.cli.execparser import add_exec_parser, add_run_parser
    add_exec_parser(sub, common)
    add_run_parser(sub, common)
    add_completion(sub)
    return parser


def add_completion(sub: _Subcommands) -> None:
    p = sub.add_parser("completion", help="print the shell completion script for bash or zsh",
                       description="Prints a completion script generated from tcl's parsers: subcommands,\n"
                       "flags and their choices complete. The package installs both; by hand:\n"
                       "  tcl completion bash > ~/.local/share/bash-completion/completions/tcl\n"
                       "  tcl completion zsh > ~/.zfunc/_tcl    (with ~/.zfunc in $fpath)",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shell", choices=("bash", "zsh"), help="the shell to complete for")
    # No argparse choices: the generated script would offer them beside the shells.
    p.add_argument("program", nargs="?", default="tcl",
                   help="the program to complete: tcl (default), tcl-master, tcl-agent or tcl-gm")


# What the tcluster-master Debian package adds to the venv (packaging/build_deb.py MASTER_ONLY
# and MASTER_MODULES).
MASTER_PACKAGE_LIBRARIES = ("numpy", "scipy", "aiohttp", "prometheus_client", "orjson", "aetcd", "cryptography")
MASTER_PACKAGE_MODULES = tuple(f"tcluster.{m}" for m in ("master", "gm", "scheduler", "sim", "pack", "etcd", "federation"))


def master_package_part(missing: str | None) -> str | None:
    """What of tcluster-master a ModuleNotFoundError names (numpy, tcluster.sim) when that part
    is not installed at all, else None: a module missing inside an installed part is a bug
    to show, not a package to install."""
    if missing is None:
        return None
    top = missing.split(".")[0]
    if top not in MASTER_PACKAGE_LIBRARIES:
        top = next((m for m in MASTER_PACKAGE_MODULES if missing == m or missing.startswith(m + ".")), "")
    try:
        return top if top and importlib.util.find_spec(top) is None else None
    except (ImportError, ValueError):   # its parent is missing too
        return top


def main(argv: Sequence[str] | None = None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser(argv).parse_args(argv)
        args.dashdash = "--" in argv     # `tcl submit run.sh` is a script, `tcl submit -- run.sh` a command
    except SystemExit as exc:  # argparse already printed usage or help
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return run(args)


def run(args: argparse.Namespace) -> int:
    client: MasterClient | None = None   # once made, it names the master that answered
    try:
        if args.command_name in LOCAL_COMMANDS:
            return load(LOCAL_COMMANDS[args.command_name])(args)
        if args.command_name in FEDERATION_COMMANDS and (args.federation or args.command_name in ONLY_FEDERATED):
            return load("tcluster.cli.federation:run")(args, load(FEDERATION_COMMANDS[args.command_name]))
        handler = load(MASTER_COMMANDS[args.command_name])
        from tcluster.cli.client import MasterClient, check_master_list
        client = MasterClient(check_master_list(args.master), wait_leader_s=args.wait_leader_s)
        with client:
            return handler(args, client)
    except InvalidArgument as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Unavailable as exc:     # e.g. the CA a token pins could not be fetched: nothing was sent
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        silence_stdout()
        return EXIT_BROKEN_PIPE
    except ModuleNotFoundError as exc:
        part = master_package_part(exc.name)
        if part is None:
            raise
        # A node with the tcluster package only: tcl sim, tcl pack and tcl dev need the
        # scheduler and numpy, which only tcluster-master installs.
        print(f"error: tcl {args.command_name} needs {part}, which this install lacks: "
              "install the tcluster-master package (or pip install tcluster)", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:
        if not is_rpc_error(exc):
            raise
        return report_rpc_error(exc, client.address if client is not None else args.master, args.master)


def load(target: str) -> Callable[..., int]:
    """The function a "module:function" string names, importing its module now."""
    module, _, name = target.partition(":")
    handler: Callable[..., int] = getattr(importlib.import_module(module), name)
    return handler


def is_rpc_error(exc: Exception) -> bool:
    """An error from grpc; only a command that imported grpc can raise one, so a run that
    never did need not import it to tell."""
    grpc = sys.modules.get("grpc")
    return grpc is not None and isinstance(exc, grpc.RpcError)


def report_rpc_error(exc: grpc.RpcError, answered: str, masters: str) -> int:
    """Prints the message for an error from the master at `answered` (and a login hint if
    one applies to `masters`); returns the exit code."""
    from tcluster.cli.client import explain_rpc_error
    from tcluster.cli.login import login_hint
    exit_code, message = explain_rpc_error(exc, answered)
    print(message, file=sys.stderr)
    if hint := login_hint(exc, masters):
        print(hint, file=sys.stderr)
    return exit_code


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # stdout is not a real file (e.g. captured in tests): nothing to protect


if __name__ == "__main__":
    sys.exit(main())
