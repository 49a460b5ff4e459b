"""`tcl dev`: one master and one local agent in a single process, for trying tcluster.
Secure by default (cli/devsecure.py): TLS, a joined agent, and a token for the
invoking user only; tasks run as that user."""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tcluster.agent.joinclient import JoinError, join
from tcluster.agent.gpus import banner as gpu_banner
from tcluster.agent.joinstate import load_joined
from tcluster.agent.main import build_agent, settings_from_args as agent_settings_from_args
from tcluster.agent.runtime.base import RuntimeSetupError
from tcluster.cli.credentials import credentials_for, credentials_path
from tcluster.daemonkit.runner import explain_settings_error, setup_logging, wait_for_stop_signal
from tcluster.cli.devsecure import deny_uids_except, ensure_login, ensure_pki, invoking_user, join_token
from tcluster.domain.errors import InvalidArgument
from tcluster.master.app.server import start_master
from tcluster.master.settings import MasterSettings


def _agent_args(args: argparse.Namespace, data_dir: Path) -> argparse.Namespace:
    return argparse.Namespace(
        # None: the join's agent address; _local_agent then points it at this start's port
        master=None, node=getattr(args, "node", None) or socket.gethostname(),
        cpus=getattr(args, "cpus", None), memory=getattr(args, "memory", None),
        reserve_cpus="0", reserve_memory="0", labels="", state_dir=data_dir / "agent",
        runtime=getattr(args, "runtime", None) or "auto", cgroup_parent=None, heartbeat_interval_s=1.0,
        usage_interval_s=0.0,     # the master's choice from the cluster size
    )


def _banner(listen: str, data_dir: Path, node: str, runtime: str, url: str = "", user: str = "",
            token: str = "") -> str:
    # Like Jupyter's ?token= link, but in the fragment, which browsers never send: the page
    # trades it for a session cookie and drops it from the address bar.
    link = f"{url}#login={token}" if url and token else url
    dashboard = (f"\n  Dashboard: {url}   (Prometheus: {url}metrics)\n"
                 + (f"  Log in to it with this link (it holds your token): {link}\n" if link != url else "")
                 if url else "")
    login = (f"\n  You are admin '{user}' of this cluster (TLS; your token is in {credentials_path()});"
             f"\n  tasks run as your Unix user.\n") if user else ""
    return f"""
tcluster dev: master on {listen}, agent '{node}' (runtime {runtime}), state in {data_dir}
{dashboard}{login}
  In another shell:
    .venv/bin/tcl submit --cpu 0.5 --mem 256Mi -- python3 -c 'print(42)'
    .venv/bin/tcl status <ID>      .venv/bin/tcl logs <ID>      .venv/bin/tcl nodes

  Ctrl-C stops the master, the agent and the tasks it started.
"""


def _runtime_text(agent: Any) -> str:
    """The runtime's name, and the GPUs the agent offers where it found some."""
    gpus = agent.tasks.gpus
    found = gpu_banner(gpus.devices, gpus.source)
    return f"{agent.runtime.name}{found}"


async def _local_agent(master_settings: MasterSettings, agent_args: argparse.Namespace, client: str,
                       agent_port: int) -> object:
    """The local agent joins like any node (first start), then talks mutual TLS. Tasks run as
    the developer (root only if the developer is root) and stop on Ctrl-C."""
    if load_joined(agent_args.state_dir) is None:
        node = agent_args.node
        await join(client, join_token(master_settings.data_dir), node, agent_args.state_dir)
        agent_args.node = None        # from now on the certificate names it
    _, uid = invoking_user()
    settings = agent_settings_from_args(agent_args, allow_process_runtime=True, kill_tasks_on_exit=True,
                                        default_user="", allow_root=uid == 0, deny_uids=deny_uids_except(uid),
                                        kill_grace_s=2.0)
    # this start's agent port (port 0 in tests), not the one recorded at the join
    return build_agent(settings.model_copy(update={"master": f"127.0.0.1:{agent_port}"}))


async def _run(master_settings: MasterSettings, agent_args: argparse.Namespace) -> int:
    ensure_pki(master_settings.data_dir)
    master = await start_master(master_settings)
    host = master_settings.listen.rpartition(":")[0]
    client = f"{'127.0.0.1' if host in ('0.0.0.0', '::', '[::]') else host}:{master.port}"
    try:
        user = ensure_login(master_settings.data_dir, client)
        agent: Any = await _local_agent(master_settings, agent_args, client, master.agent_port)
    except BaseException:
        await master.stop()
        raise
    runner = asyncio.create_task(agent.run(), name="agent")
    url = f"http://{master_settings.http.rpartition(':')[0]}:{master.http_port}/" if master.dashboard else ""
    token = credentials_for(client).token
    print(_banner(client, master_settings.data_dir, agent.settings.node, _runtime_text(agent), url, user, token),
          flush=True)
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
    except (RuntimeSetupError, OSError, JoinError) as error:
        print(f"tcl dev: cannot start: {error}", file=sys.stderr)
        return 1
