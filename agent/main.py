"""`tcl-agent`: the per-node daemon that runs tasks in cgroup containers."""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
from pathlib import Path

import psutil
from pydantic import ValidationError

from tcluster import __version__
from tcluster.version import add_version_flag
from tcluster.agent.daemon import Agent
from tcluster.agent.gpudetect import inventory
from tcluster.agent.gpus import banner as gpu_banner, parse_selection
from tcluster.agent.reload import AgentReloader
from tcluster.agent.joinstate import PKI_DIR, JoinedStateError, agent_address, load_joined
from tcluster.agent.tasks import state_dir_path
from tcluster.agent.runtime import make_node_runtime, make_runtime
from tcluster.agent.runtime.base import Runtime
from tcluster.agent.runtime.base import RuntimeSetupError
from tcluster.agent.settings import RUNTIMES, AgentSettings
from tcluster.domain.constraints import parse_labels
from tcluster.daemonkit.configfile import ConfigError, add_config_flag, load_args
from tcluster.daemonkit.logsetup import add_log_flags
from tcluster.daemonkit.runner import explain_argument_error, explain_settings_error, setup_logging, wait_for_stop_signal
from tcluster.domain.errors import InvalidArgument
from tcluster.daemonkit.leaders import join_addresses, parse_addresses
from tcluster.domain.nodelabels import check_declared
from tcluster.daemonkit.sdnotify import Notifier
from tcluster.domain.units import parse_bits, parse_bytes, parse_cpu


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tcl-agent", description="tcluster agent: runs tasks in cgroup containers.",
                                epilog="join a secure cluster first: tcl-agent join --master HOST:PORT --token TOKEN "
                                       "(see tcl-agent join --help)")
    p.add_argument("--master", default=None, metavar="HOST:PORT[,...]",
                   help="master address, or every master of an HA cluster comma-separated (default "
                        "127.0.0.1:7070; once joined: the masters' hosts with the agent port from the join)")
    p.add_argument("--node", default=None,
                   help="node name, unique in the cluster (default: hostname; once joined: the certificate's)")
    p.add_argument("--cpus", help="declared CPU capacity in cores (default: detected)")
    p.add_argument("--memory", help="declared memory capacity, e.g. 8Gi (default: detected)")
    p.add_argument("--reserve-cpus", default="0", help="cores kept back for the agent itself")
    p.add_argument("--reserve-memory", default="0", help="memory kept back for the agent itself")
    p.add_argument("--labels", default="", help="node labels k=v,k2=v2 (not under tcluster.io/: the join token pins those)")
    p.add_argument("--state-dir", type=Path, default=Path("/var/lib/tcluster/agent"),
                   help="logs and task state (default %(default)s)")
    p.add_argument("--runtime", default="auto", choices=RUNTIMES, help="container backend (default %(default)s)")
    p.add_argument("--cgroup-parent", default=None, help="where task cgroups go: `scope` (a delegated systemd scope, tcl-tasks-<node>.scope; the default "
                        "when run as a Delegate=yes service on cgroup v2), `delegated` (the agent's own unit; "
                        "systemd >= 254 with DelegateSubgroup=), or a path under the cgroup root (default "
                        "otherwise: tcluster/<node>)")
    p.add_argument("--heartbeat-interval-s", type=float, default=1.0)
    p.add_argument("--usage-interval-s", type=float, default=0.0,
                   help="send task usage at most this often (changes still go at once); "
                        "0: the master chooses from the cluster size (default)")
    p.add_argument("--default-user", default="nobody",
                   help="user for tasks that name none (default %(default)s; '' = the agent's own)")
    p.add_argument("--allow-root", action="store_true", help="let tasks run as root (default: refused)")
    p.add_argument("--no-unlimited-memory", dest="unlimited_memory", action="store_false", default=None,
                   help="refuse tasks without a memory limit (`tcl submit --mem unlimited`): they fail at start")
    p.add_argument("--deny-uids", metavar="RANGES",
                   help="never run tasks as these uids, whatever the master asks, except the nobody user "
                        "(default 0-999: system users; `none` for no range; root still needs --allow-root)")
    p.add_argument("--pids-max", type=int, default=4096, help="processes+threads per task, a ceiling: a job "
                   "may ask less, never more (default %(default)s)")
    p.add_argument("--log-max", default="64Mi",
                   help="per log file before it rotates to .1, a ceiling: a job may ask less, never more; 0 = no cap "
                        "(default %(default)s)")
    p.add_argument("--task-retention-s", type=float, default=3 * 86400.0,
                   help="a finished task's directory (logs, launch record) is removed this long after it "
                        "ended (default 3 days)")
    p.add_argument("--docker-host", metavar="URL",
                   help="docker engine for tasks with an image, e.g. unix:///run/docker.sock (default: none; "
                        "'local' = the default socket)")
    p.add_argument("--net", metavar="BANDWIDTH",
                   help="egress bandwidth the node offers tasks, e.g. 1Gbit; turns on task networks")
    p.add_argument("--networks", action="store_true",
                   help="give tasks their own network namespaces (modes none and bridge) without declaring bandwidth")
    p.add_argument("--net-subnet", default="10.88.0.0/24", help="task addresses on this node (default %(default)s)")
    p.add_argument("--masquerade", action="store_true",
                   help="NAT the task subnet out of the node with one nftables rule (off by default)")
    p.add_argument("--gpus", metavar="all|N|I,J",
                   help="GPUs this node offers: all, the first N, these indices (e.g. 0,2; one index: 3,), "
                        "or 0 for none; found through NVML (pip install nvidia-ml-py) unless --gpu-devices "
                        "declares them (default: all that are found)")
    p.add_argument("--gpu-devices", metavar="PATHS",
                   help="declare the GPUs' device nodes, comma-separated (index i = the i-th path), for hosts "
                        "without NVML; every one is offered unless --gpus narrows them")
    p.add_argument("--no-namespaces", action="store_true",
                   help="run tasks without their own PID/mount/UTS/IPC namespaces")
    add_log_flags(p)
    # Test only: when this file appears, the heartbeat loop hangs (tests/vm: the watchdog restarts the agent).
    p.add_argument("--test-hang-file", type=Path, default=None, help=argparse.SUPPRESS)
    add_config_flag(p, "/etc/tcluster/agent.toml")
    add_version_flag(p)
    return p


def settings_from_args(args: argparse.Namespace, **overrides: object) -> AgentSettings:
    """Parses the human forms once; InvalidArgument names the flag. Joined state (STATE_DIR/
    joined.json) fixes the node name, the master's agent address and mutual TLS."""
    cpus = parse_cpu(args.cpus, "--cpus") if args.cpus else float(psutil.cpu_count() or 1)
    memory = parse_bytes(args.memory, "--memory") if args.memory else psutil.virtual_memory().total
    try:
        labels = parse_labels(args.labels)
    except ValueError as error:
        raise InvalidArgument("--labels", str(error)) from None
    check_declared(labels)
    identity = identity_from_args(args, labels)
    return AgentSettings(
        **identity, cpus=cpus, memory_bytes=memory,
        reserve_cpus=parse_cpu(args.reserve_cpus, "--reserve-cpus"),
        reserve_memory_bytes=parse_bytes(args.reserve_memory, "--reserve-memory"),
        state_dir=args.state_dir, runtime=args.runtime, cgroup_parent=args.cgroup_parent,
        heartbeat_interval_s=args.heartbeat_interval_s, usage_interval_s=args.usage_interval_s, **_runtime_options(args), **overrides,
        test_hang_file=getattr(args, "test_hang_file", None),
        **_log_options(args), **_network_options(args),
    )


def identity_from_args(args: argparse.Namespace, labels: dict[str, str]) -> dict[str, object]:
    """master, node, labels and tls_dir: from the flags, or from the join (which wins)."""
    given = join_addresses(parse_addresses(args.master, "--master")) if args.master else ""
    joined = load_joined(args.state_dir) if getattr(args, "state_dir", None) else None
    if joined is None:
        return {"master": given or "127.0.0.1:7070", "node": args.node or socket.gethostname(),
                "labels": labels, "tls_dir": None}
    state, _ = joined
    if args.node and args.node != state.node:
        raise InvalidArgument("--node", f"{args.node[:60]!r} contradicts this node's certificate "
                                        f"({args.state_dir}/pki/node.crt names {state.node}); leave --node out")
    master = state.agent_address
    if given:   # dial these hosts (other routes to the masters), still at the agent port
        master = agent_address(given, int(state.agent_address.split(",")[0].rpartition(":")[2]))
    return {"master": master, "node": state.node, "labels": {**labels, **state.labels},
            "tls_dir": args.state_dir / PKI_DIR}


def _network_options(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {}
    docker = getattr(args, "docker_host", None)
    if docker:
        out["docker_host"] = "unix:///var/run/docker.sock" if docker == "local" else docker
    net = getattr(args, "net", None)
    if net:
        out["net_bps"] = parse_bits(net, "--net")
    if net or getattr(args, "networks", False):
        out["networks"] = True
        out["net_subnet"] = getattr(args, "net_subnet", None) or "10.88.0.0/24"
        out["masquerade"] = bool(getattr(args, "masquerade", False))
    return out


def _log_options(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {}
    if getattr(args, "log_max", None) is not None:
        out["log_max_bytes"] = parse_bytes(args.log_max, "--log-max")
    if getattr(args, "task_retention_s", None) is not None:
        out["task_retention_s"] = args.task_retention_s
    return out


def _runtime_options(args: argparse.Namespace) -> dict[str, object]:
    """The task-isolation flags; absent (e.g. `tcl dev`'s namespace) keeps the defaults."""
    out: dict[str, object] = {}
    for flag, key in (("default_user", "default_user"), ("allow_root", "allow_root"), ("pids_max", "pids_max"),
                      ("deny_uids", "deny_uids"), ("unlimited_memory", "unlimited_memory")):
        if getattr(args, flag, None) is not None:
            out[key] = getattr(args, flag)
    if getattr(args, "no_namespaces", False):
        out["namespaces"] = False
    for flag in ("gpus", "gpu_devices"):
        if getattr(args, flag, None):
            out[flag] = getattr(args, flag)
    return out


def build_agent(settings: AgentSettings) -> Agent:
    state_dir_path(settings.state_dir)
    gpus = inventory(parse_selection(settings.gpus or "all"), settings.gpu_devices)
    native = make_runtime(settings.runtime, settings.node, settings.state_dir, settings.cgroup_parent,
                          allow_process=settings.allow_process_runtime, namespaces=settings.namespaces)
    runtime: Runtime = native
    if settings.docker_host or settings.networks:
        runtime = make_node_runtime(native, settings.node, settings.state_dir, docker_host=settings.docker_host,
                                    net=settings.networks, net_subnet=settings.net_subnet,
                                    masquerade=settings.masquerade)
    runtime.setup()
    return Agent(settings, runtime, gpus)


async def run_agent(agent: Agent, reloader: AgentReloader | None = None) -> int:
    """0 after SIGTERM/SIGINT; 1 if the agent itself failed (systemd then restarts it).
    SIGHUP reloads the config file once the agent is ready (agent/reload.py)."""
    runner = asyncio.create_task(agent.run(), name="agent")
    stop = asyncio.create_task(wait_for_stop_signal(), name="stop-signal")
    if reloader is not None:
        agent.on_ready = reloader.install
    try:
        await asyncio.wait({runner, stop}, return_when=asyncio.FIRST_COMPLETED)
        if runner.done() and not runner.cancelled() and runner.exception() is not None:
            error = runner.exception()
            print(f"tcl-agent: stopped by an unexpected error: {error!r}", file=sys.stderr, flush=True)
            return 1
        return 0
    finally:
        agent.notifier.stopping()
        if reloader is not None and agent.ready:
            reloader.uninstall()
        runner.cancel()
        stop.cancel()
        await agent.shutdown()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "join":
        from tcluster.agent.joincmd import main as join_main
        return join_main(argv[1:])
    signal.signal(signal.SIGHUP, signal.SIG_IGN)   # until ready: an early SIGHUP must not kill the start
    parser = build_parser()
    try:
        loaded = load_args(parser, argv)
    except ConfigError as error:
        print(f"tcl-agent: {error}", file=sys.stderr)
        return 2
    setup_logging(loaded.args.log_level, loaded.args.log_format)
    try:
        settings = settings_from_args(loaded.args)
        agent = build_agent(settings)
    except JoinedStateError as error:
        print(f"tcl-agent: cannot start: {error}", file=sys.stderr)
        return 1
    except InvalidArgument as error:
        print(explain_argument_error("tcl-agent", error, loaded.origin), file=sys.stderr)
        return 2
    except ValidationError as error:
        print(explain_settings_error("tcl-agent", error, loaded.origin), file=sys.stderr)
        return 2
    except (RuntimeSetupError, OSError) as error:
        print(f"tcl-agent: cannot start: {error}", file=sys.stderr)
        return 1
    tls = " (mutual TLS)" if settings.tls_dir is not None else ""
    devices = agent.tasks.gpus.devices
    gpus = gpu_banner(devices, agent.tasks.gpus.source)
    print(f"tcl-agent {__version__} {settings.node}: runtime {agent.runtime.name}, master {settings.master}{tls}{gpus}",
          file=sys.stderr, flush=True)
    agent.notifier = Notifier.from_env()
    reloader = AgentReloader(agent, parser, loaded, settings_from_args, agent.notifier)
    return asyncio.run(run_agent(agent, reloader))


if __name__ == "__main__":
    sys.exit(main())
