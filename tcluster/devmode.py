"""`tcl dev`: one master and one local agent in a single process, for trying tcluster."""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from pathlib import Path

from pydantic import ValidationError

from tcluster.agent.main import build_agent, settings_from_args as agent_settings_from_args
from tcluster.agent.runtime.base import RuntimeSetupError
from tcluster.daemon import explain_settings_error, setup_logging, wait_for_stop_signal
from tcluster.errors import InvalidArgument
from tcluster.master.server import start_master
from tcluster.master.settings import MasterSettings


def _agent_args(args: argparse.Namespace, data_dir: Path) -> argparse.Namespace:
    return argparse.Namespace(
        master=args.listen, node=getattr(args, "node", None) or socket.gethostname(),
        cpus=getattr(args, "cpus", None), memory=getattr(args, "memory", None),
        reserve_cpus="0", reserve_memory="0", labels="", state_dir=data_dir / "agent",
        runtime=getattr(args, "runtime", None) or "auto", cgroup_parent=None, heartbeat_interval_s=1.0,
    )


def _banner(listen: str, data_dir: Path, node: str, runtime: str, url: str = "") -> str:
    dashboard = f"\n  Dashboard: {url}   (Prometheus: {url}metrics)\n" if url else ""
    return f"""
tcluster dev: master on {listen}, agent '{node}' (runtime {runtime}), state in {data_dir}
{dashboard}
  In another shell:
    .venv/bin/tcl submit --cpu 0.5 --mem 256Mi -- python3 -c 'print(42)'
    .venv/bin/tcl status <ID>      .venv/bin/tcl logs <ID>      .venv/bin/tcl nodes

  Ctrl-C stops the master, the agent and the tasks it started.
"""


async def _run(master_settings: MasterSettings, agent_args: argparse.Namespace) -> int:
    master = await start_master(master_settings)
    agent_args.master = f"127.0.0.1:{master.port}"
    try:
        # Dev mode runs tasks as the developer (root included) and stops them on Ctrl-C.
        agent = build_agent(agent_settings_from_args(agent_args, allow_process_runtime=True, kill_tasks_on_exit=True,
                                                     default_user="", allow_root=True, kill_grace_s=2.0))
    except BaseException:
        await master.stop()
        raise
    runner = asyncio.create_task(agent.run(), name="agent")
    listen = f"{master_settings.listen.rpartition(':')[0]}:{master.port}"
    url = f"http://{master_settings.http.rpartition(':')[0]}:{master.http_port}/" if master.dashboard else ""
    print(_banner(listen, master_settings.data_dir, agent.settings.node, agent.runtime.name, url), flush=True)
    try:
        await wait_for_stop_signal()
        print("\nstopping: killing tasks, then the agent and the master", file=sys.stderr, flush=True)
    finally:
        await agent.shutdown()
        runner.cancel()
        await master.stop()
    return 0


def run_dev(args: argparse.Namespace) -> int:
    setup_logging(getattr(args, "log_level", "WARNING") or "WARNING")
    data_dir = Path(args.data_dir).resolve()
    try:
        http = getattr(args, "http", None) or ("127.0.0.1:0" if args.listen.endswith(":0") else "127.0.0.1:7080")
        master_settings = MasterSettings(listen=args.listen, data_dir=data_dir, http="" if http == "off" else http,
                                         http_optional=not getattr(args, "http", None))
        return asyncio.run(_run(master_settings, _agent_args(args, data_dir)))
    except ValidationError as error:
        print(explain_settings_error("tcl dev", error), file=sys.stderr)
        return 2
    except InvalidArgument as error:
        print(f"tcl dev: {error}", file=sys.stderr)
        return 2
    except (RuntimeSetupError, OSError) as error:
        print(f"tcl dev: cannot start: {error}", file=sys.stderr)
        return 1
