"""`tcl-master`: the central scheduler daemon."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Callable

from pydantic import ValidationError

from tcluster.version import add_version_flag
from tcluster.daemonkit import gcpolicy
from tcluster.daemonkit.configfile import ConfigError, Loaded, add_config_flag, load_args
from tcluster.daemonkit.logsetup import add_log_flags
from tcluster.daemonkit.runner import explain_settings_error, setup_logging, wait_for_stop_signal
from tcluster.wire.features import DEFAULT_REPORT_BUDGET_PER_S
from tcluster.domain.errors import InvalidArgument, TclusterError
from tcluster.domain.ledger import DEFAULT_LEDGER_RETENTION_S
from tcluster.domain.units import parse_duration
from tcluster.master.queues import load_tree
from tcluster.master.app.reload import MasterReloader
from tcluster.master.app.server import RunningMaster, start_master
from tcluster.master.settings import MasterSettings
from tcluster.scheduler.fairness import DEFAULT_FAIRNESS, FAIRNESS_POLICIES
from tcluster.scheduler.lotes.classes import load_classes
from tcluster.daemonkit.sdnotify import Notifier
from tcluster.scheduler.placement import DEFAULT_PLACEMENT, PLACEMENT_POLICIES


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tcl-master", description="tcluster master: schedules jobs onto agents.",
        epilog="identity commands (offline, on the data dir): tcl-master init | join-token create | node revoke "
               "| user add/list/remove; tcl-master status: the masters of a store and which one leads "
               "(each with --help)")
    p.add_argument("--listen", default="127.0.0.1:7070",
                   help="gRPC address for clients (default %(default)s); TLS once `tcl-master init` ran")
    p.add_argument("--agent-listen", default="", metavar="ADDR",
                   help="with TLS: the mutual-TLS address for agents (default: the --listen host, port + 1)")
    p.add_argument("--insecure", action="store_true",
                   help="serve a non-loopback --listen without TLS (anyone who reaches it controls the cluster)")
    p.add_argument("--data-dir", default=".tcluster", type=Path,
                   help="state directory (SQLite, PKI, dashboard history); default %(default)s")
    p.add_argument("--store", default="", metavar="URL",
                   help="where the durable state lives: sqlite:PATH (default: DATA_DIR/master.db, one master) or "
                        "etcd://HOST:PORT[,HOST:PORT...] (several masters, one leads; see docs/high-availability.md)")
    p.add_argument("--store-prefix", default="/tcluster", metavar="PREFIX",
                   help="etcd: this cluster's key prefix (several clusters can share one etcd); default %(default)s")
    p.add_argument("--lease-ttl-s", type=int, default=5,
                   help="etcd: a leader that stops renewing its lease is replaced this long after (default %(default)s)")
    p.add_argument("--store-max-txn-ops", type=int, default=128, metavar="N",
                   help="etcd: operations per transaction, at most etcd's --max-txn-ops (default %(default)s); "
                        "larger batches are written as several transactions in order")
    p.add_argument("--advertise", default="", metavar="HOST:PORT",
                   help="etcd: the address standbys give clients for this master (default: --listen's)")
    p.add_argument("--fairness", default=DEFAULT_FAIRNESS,
                   help=f"which pending task next: {', '.join(sorted(FAIRNESS_POLICIES))} (default %(default)s)")
    p.add_argument("--queues", metavar="FILE", type=Path,
                   help="queue tree (YAML); SIGHUP reloads it (default: one queue, `default`)")
    p.add_argument("--reserve-after-s", type=float, default=30.0,
                   help="a job whose next task waited this long gets a node held for it (default %(default)s)")
    p.add_argument("--backfill", dest="no_backfill", action="store_false", default=False,
                   help="a job whose --time-limit ends before a held node's earliest start estimate may start "
                        "there (the default; docs/queues.md, \"Backfill\")")
    p.add_argument("--no-backfill", action="store_true", help="held nodes take no other job")
    p.add_argument("--usage-half-life", type=_half_life, default=0.0, metavar="DURATION",
                   help="past usage of queues and users decays with this half-life (e.g. 7d) and orders "
                        "siblings, so that their shares even out over time (default: off)")
    p.add_argument("--preemption", action="store_true",
                   help="stop tasks of queues above their share to restore queues below theirs (docs/queues.md, "
                        "\"Preemption\"; default off)")
    p.add_argument("--preempt-after-s", type=float, default=30.0, metavar="S",
                   help="how long a queue stays below its share, with work waiting, before it reclaims "
                        "(default %(default)s)")
    p.add_argument("--preempt-grace-s", type=float, default=30.0, metavar="S",
                   help="a preempted task gets SIGTERM, then SIGKILL this much later (default %(default)s)")
    p.add_argument("--preempt-min-runtime-s", type=float, default=60.0, metavar="S",
                   help="a task that has run less than this is never preempted (default %(default)s)")
    p.add_argument("--preempt-max-per-round", type=int, default=10, metavar="N",
                   help="at most N tasks preempted per scheduling round (default %(default)s)")
    p.add_argument("--placement", default=DEFAULT_PLACEMENT,
                   help=f"which node: {', '.join(sorted(PLACEMENT_POLICIES))} (default %(default)s)")
    p.add_argument("--lotes-classes", metavar="FILE", type=Path,
                   help="--placement lotes: job classes (YAML: classes: [{name, request, share, speed}]); "
                        "default: learned by k-means over recently submitted tasks")
    p.add_argument("--lotes-k", type=int, default=4, metavar="K",
                   help="--placement lotes: classes to learn when no file is given (default %(default)s)")
    p.add_argument("--lotes-config-label", metavar="LABEL",
                   help="--placement lotes: group machines into configurations by this node label "
                        "(default: by identical capacity)")
    p.add_argument("--lotes-drift", type=float, default=0.1, metavar="D",
                   help="--placement lotes: re-solve when learned class shares drift this far "
                        "(total variation; default %(default)s)")
    p.add_argument("--federation-lm-id", type=int, default=None, metavar="N",
                   help="serve Megha's LocalManagerService as local manager N of a federation (tcl-gm daemons "
                        "place tasks here; default: not federated)")
    p.add_argument("--federation-lm-name", default="", metavar="NAME",
                   help="this local manager's name as global managers show it (default lm<N>)")
    p.add_argument("--federation-gms", type=int, default=2, metavar="M",
                   help="global managers in the federation: the nodes are split into M partitions "
                        "(default %(default)s)")
    p.add_argument("--federation-state-interval-s", type=float, default=10.0, metavar="S",
                   help="every global manager gets this LM's full state this often, task ends at once "
                        "(default %(default)s)")
    p.add_argument("--heartbeat-interval-s", type=float, default=1.0, help="asked of agents (default %(default)s)")
    p.add_argument("--report-budget-per-s", type=float, default=DEFAULT_REPORT_BUDGET_PER_S,
                   help="usage reports a second from all agents together: an agent's usage interval is "
                        "nodes / this, at least the heartbeat interval (default %(default)s)")
    p.add_argument("--node-timeout-s", type=float, default=15.0,
                   help="a node silent this long is DOWN (default %(default)s)")
    p.add_argument("--lost-timeout-s", type=float, default=30.0,
                   help="a DOWN node's tasks are LOST this much later, and retried if their job allows "
                        "(default %(default)s)")
    p.add_argument("--start-timeout-s", type=float, default=120.0,
                   help="a task not running this long after its launch is stopped and counted LOST "
                        "(default %(default)s)")
    p.add_argument("--job-retention-s", type=float, default=7 * 86400.0,
                   help="finished jobs are kept this long, then forgotten (default 7 days)")
    p.add_argument("--ledger-retention", type=duration_arg, default=DEFAULT_LEDGER_RETENTION_S, metavar="DURATION",
                   help="each finished attempt's usage (tcl report, tcl history) is kept this long, e.g. 400d, "
                        "90d, 12h (default 400d)")
    p.add_argument("--http", metavar="ADDR",
                   help="dashboard, JSON API and /metrics (default 127.0.0.1:7080; port 0 when --listen has "
                        "port 0; `off` for none)")
    p.add_argument("--no-task-metrics", action="store_true",
                   help="no per-task series on /metrics (for very large clusters)")
    p.add_argument("--dcgm-gpu-metrics", action="store_true",
                   help="GPU series also under dcgm-exporter's names (DCGM_FI_DEV_*), for its dashboards; "
                        "off by default: beside a dcgm-exporter they would count each GPU twice")
    p.add_argument("--history-recent-s", type=float, default=600.0,
                   help="usage history kept at heartbeat resolution (default %(default)s)")
    p.add_argument("--history-long-s", type=float, default=86400.0,
                   help="usage history kept downsampled (default %(default)s: 24 h)")
    p.add_argument("--history-long-step-s", type=float, default=300.0,
                   help="bucket of the downsampled history: means of rates, maxima of levels (default %(default)s)")
    p.add_argument("--status-visibility", choices=("all", "own"), default="all",
                   help="whose jobs a user (not an admin) may see in status and lists (default %(default)s)")
    p.add_argument("--log-streams-per-user", type=int, default=8, metavar="N",
                   help="open log streams (`tcl logs`, with or without -f) one user may hold at once; "
                        "more get RESOURCE_EXHAUSTED (default %(default)s)")
    p.add_argument("--execs-per-task", type=int, default=4, metavar="N",
                   help="open `tcl exec`s into one task at once (default %(default)s)")
    p.add_argument("--execs-per-user", type=int, default=8, metavar="N",
                   help="open `tcl exec`s one user may hold at once (default %(default)s)")
    add_log_flags(p)
    add_config_flag(p, "/etc/tcluster/master.toml")
    add_version_flag(p)
    return p


def _half_life(text: str) -> float:
    """--usage-half-life: a duration (90, 30s, 2h, 7d, 1-00:00:00); 0 or off: no decay."""
    if text.strip().lower() in ("off", "none", "0"):
        return 0.0
    try:
        return parse_duration(text, "usage_half_life")
    except InvalidArgument as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_admin_parser() -> argparse.ArgumentParser:
    """The offline subcommands; `tcl-master [flags]` without one serves."""
    from tcluster.master.identity.admin import add_admin_commands   # only when asked: the daemon starts without it
    from tcluster.master.app.status import add_status_command
    from tcluster.master.identity.users import add_user_commands
    p = argparse.ArgumentParser(prog="tcl-master", description="tcluster master: cluster identity commands.")
    sub = p.add_subparsers(dest="command", required=True)
    add_admin_commands(sub)
    add_user_commands(sub)
    add_status_command(sub)
    return p


def http_address(args: argparse.Namespace) -> str:
    """--http, else 127.0.0.1:7080; a master on port 0 (tests) gets its dashboard on port 0 too."""
    if args.http is not None:
        return "" if args.http.lower() in ("off", "none", "") else args.http
    return "127.0.0.1:0" if args.listen.endswith(":0") else "127.0.0.1:7080"


def duration_arg(text: str) -> float:
    """A flag's duration (400d, 12h, 90m, seconds), as argparse and the TOML file take it."""
    try:
        seconds = parse_duration(text, "--ledger-retention")
    except InvalidArgument as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError("--ledger-retention: must be more than 0 (e.g. 400d)")
    return seconds


def settings_from_args(args: argparse.Namespace) -> MasterSettings:
    return MasterSettings(
        listen=args.listen, data_dir=args.data_dir, fairness=args.fairness, placement=args.placement,
        agent_listen=getattr(args, "agent_listen", ""), insecure=getattr(args, "insecure", False),
        heartbeat_interval_s=args.heartbeat_interval_s, node_timeout_s=args.node_timeout_s,
        lost_timeout_s=args.lost_timeout_s, start_timeout_s=args.start_timeout_s,
        report_budget_per_s=getattr(args, "report_budget_per_s", DEFAULT_REPORT_BUDGET_PER_S),
        job_retention_s=args.job_retention_s,
        ledger_retention_s=getattr(args, "ledger_retention", DEFAULT_LEDGER_RETENTION_S),
        queues_file=args.queues, reserve_after_s=args.reserve_after_s,
        backfill=not getattr(args, "no_backfill", False),
        usage_half_life_s=getattr(args, "usage_half_life", 0.0),
        preemption=getattr(args, "preemption", False), preempt_after_s=getattr(args, "preempt_after_s", 30.0),
        preempt_grace_s=getattr(args, "preempt_grace_s", 30.0),
        preempt_min_runtime_s=getattr(args, "preempt_min_runtime_s", 60.0),
        preempt_max_per_round=getattr(args, "preempt_max_per_round", 10),
        http=http_address(args), http_optional=args.http is None, task_metrics=not args.no_task_metrics,
        dcgm_gpu_metrics=getattr(args, "dcgm_gpu_metrics", False), history_recent_s=args.history_recent_s,
        history_long_s=args.history_long_s, history_long_step_s=args.history_long_step_s,
        lotes_classes_file=args.lotes_classes, lotes_k=args.lotes_k, lotes_config_label=args.lotes_config_label,
        lotes_drift=args.lotes_drift, status_visibility=args.status_visibility,
        log_streams_per_user=getattr(args, "log_streams_per_user", 8),
        execs_per_task=getattr(args, "execs_per_task", 4), execs_per_user=getattr(args, "execs_per_user", 8),
        store=getattr(args, "store", ""), store_prefix=getattr(args, "store_prefix", "/tcluster"),
        lease_ttl_s=getattr(args, "lease_ttl_s", 5), advertise=getattr(args, "advertise", ""),
        store_max_txn_ops=getattr(args, "store_max_txn_ops", 128),
        federation_lm_id=getattr(args, "federation_lm_id", None),
        federation_lm_name=getattr(args, "federation_lm_name", ""),
        federation_gms=getattr(args, "federation_gms", 2),
        federation_state_interval_s=getattr(args, "federation_state_interval_s", 10.0),
    )


def _announce(master: RunningMaster) -> None:
    settings = master.settings
    host = settings.listen.rpartition(":")[0]
    if master.secure:
        print(f"tcl-master listening on {host}:{master.port} (TLS), agents on port {master.agent_port} (mutual TLS); "
              f"store {settings.store_url}", file=sys.stderr, flush=True)
    else:
        print(f"tcl-master listening on {host}:{master.port}; store {settings.store_url}", file=sys.stderr, flush=True)
    if master.standby_http is not None:
        print(f"tcl-master standby: /healthz, /readyz and /metrics on http://{settings.http.rpartition(':')[0]}:"
              f"{master.standby_http.port}/ until it leads", file=sys.stderr, flush=True)


# Set only across the re-execution after a lost lease, by a master that found no PKI in
# etcd: the next one may then answer as a plaintext standby while etcd has no quorum.
HANDOFF_ENV = "TCL_MASTER_STEPPED_DOWN_INSECURE"


async def _serve(settings: MasterSettings, stepped_down_insecure: bool = False,
                 config: tuple[argparse.ArgumentParser, Loaded] | None = None) -> str:
    """Serves until a stop signal (returns "") or a lost leadership (returns why).
    config: the parser and arguments that SIGHUP re-reads (master/app/reload.py)."""
    lost = asyncio.Event()
    why: list[str] = []

    def on_lost(reason: str) -> None:
        why.append(reason)
        lost.set()
    stop = asyncio.ensure_future(wait_for_stop_signal())
    master = await _start_unless_stopped(settings, on_lost, stop, stepped_down_insecure)
    if master is None:
        return ""
    _announce(master)
    if master.election is not None:
        print(f"tcl-master standby: campaigning in {settings.store_url} prefix {settings.store_prefix}",
              file=sys.stderr, flush=True)
    notifier = Notifier.from_env()
    reloader = MasterReloader(master, *(config or (None, None)), settings_from_args, notifier)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, reloader.reload)
    notifier.ready(reloader.status())
    announced = asyncio.ensure_future(_announce_leading(master))
    fed = asyncio.ensure_future(reloader.feed())
    full_gc = asyncio.ensure_future(gcpolicy.full_collections())
    try:
        await asyncio.wait([stop, asyncio.ensure_future(lost.wait())], return_when=asyncio.FIRST_COMPLETED)
    finally:
        notifier.stopping()
        stop.cancel()
        announced.cancel()
        fed.cancel()
        full_gc.cancel()
        loop.remove_signal_handler(signal.SIGHUP)
        await master.stop(grace_s=0 if why else 1.0, resign=not why)
    if why and master.pki_checked and master.bound_pki is None:
        os.environ[HANDOFF_ENV] = "1"
    return why[0] if why else ""


async def _start_unless_stopped(settings: MasterSettings, on_lost: Callable[[str], None],
                                stop: asyncio.Future[None], stepped_down_insecure: bool) -> RunningMaster | None:
    """A first start waits for etcd as long as it takes (master/app/server.py): a stop signal
    meanwhile ends the wait (None) instead of killing the process mid-start."""
    starting = asyncio.ensure_future(start_master(settings, on_lost, stepped_down_insecure))
    await asyncio.wait([starting, stop], return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            started = await starting     # it may finish before the cancel lands
            await started.stop(grace_s=0)
        print("tcl-master: stopped before it could start", file=sys.stderr, flush=True)
        return None
    try:
        master = starting.result()        # the start's own error, if it failed
    except BaseException:
        stop.cancel()
        raise
    if stop.done():                       # both at once: the stop wins
        await master.stop(grace_s=0)
        return None
    return master


async def _announce_leading(master: RunningMaster) -> None:
    await master.leading.wait()
    if master.election is not None:
        print(f"tcl-master leading (store {master.settings.store_url})", file=sys.stderr, flush=True)
    if master.dashboard is not None:
        http_host = master.settings.http.rpartition(":")[0]
        print(f"tcl-master dashboard on http://{http_host}:{master.http_port}/", file=sys.stderr, flush=True)


def _restart_as_standby(reason: str) -> None:
    """Kubernetes' controllers exit on a lost lease; this one re-executes itself (same pid,
    same arguments), so nothing of the old term survives into the next."""
    print(f"tcl-master: leadership lost ({reason}); restarting as a standby", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "tcluster.master.app.main", *sys.argv[1:]])


SWITCH_INTERVAL_S = 0.001


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and not argv[0].startswith("-"):   # a subcommand (the daemon's own arguments are all flags)
        from tcluster.master.identity.admin import run_admin
        return run_admin(build_admin_parser(), argv)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)   # until serving: an early SIGHUP must not kill the start
    parser = build_parser()
    try:
        loaded = load_args(parser, argv)
    except ConfigError as error:
        print(f"tcl-master: {error}", file=sys.stderr)
        return 2
    args = loaded.args
    setup_logging(args.log_level, args.log_format)
    try:
        settings = settings_from_args(args)
    except ValidationError as error:
        print(explain_settings_error("tcl-master", error, loaded.origin), file=sys.stderr)
        return 2
    try:
        load_tree(settings.queues_file)   # a bad queue file stops the start, naming the line
    except InvalidArgument as error:
        print(f"tcl-master: --queues: {error}", file=sys.stderr)
        return 2
    if settings.lotes_classes_file is not None:   # a bad classes file stops the start, naming the line
        try:
            load_classes(settings.lotes_classes_file, ("cpu", "memory"))
        except InvalidArgument as error:
            print(f"tcl-master: --lotes-classes: {error}", file=sys.stderr)
            return 2
    # The group commit's thread (and the history writer's) gives the GIL up around each SQLite
    # call and waits for it back until the busy loop's switch interval ends: 1 ms instead of
    # Python's 5 ms halves a small commit's wall time beside a busy loop (bench/store_commit.py
    # --switch-ms, issue 38), and every reply and launch waits for its commit.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    gcpolicy.install()      # full collections on a timer: they were the churn's latency tail
    try:
        lost = asyncio.run(_serve(settings, os.environ.pop(HANDOFF_ENV, "") == "1", (parser, loaded)))
    except (OSError, TclusterError) as error:
        print(f"tcl-master: {error}", file=sys.stderr)
        return 1
    if lost:
        _restart_as_standby(lost)
    return 0


if __name__ == "__main__":
    sys.exit(main())
