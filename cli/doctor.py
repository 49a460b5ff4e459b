"""`tcl doctor`: a node's preflight. Gathers the facts (mounts, /proc, the unit, the shim,
the master's ports and clock) and prints one line per check from agent/preflight.py: OK,
or FAIL with the fix, or SKIP where it cannot be checked here. Exit 1 if any check
failed. install.sh runs it before starting the agent.

Which master: the node's join (STATE_DIR/joined.json) if it joined, else `master` from the
agent's config file (--config), else tcl's --master."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tcluster.agent import preflight
from tcluster.agent.preflight import FAIL, Check

MASTER_TIME_KEY = "tcl-master-time"     # initial metadata the master sends on Join and ListNodes
CONNECT_TIMEOUT_S = 3.0


def doctor(args: argparse.Namespace) -> int:
    checks = run_checks(args)
    if args.output == "json":
        print(json.dumps({"ok": not any(c.status == FAIL for c in checks),
                          "checks": [c.as_json() for c in checks]}, indent=2))
    else:
        for check in checks:
            print(f"{check.status:<5} {check.name:<12} {check.detail}")
            if check.fix:
                print(f"{'':<5} {'':<12} fix: {check.fix}")
    return 1 if any(c.status == FAIL for c in checks) else 0


def run_checks(args: argparse.Namespace) -> list[Check]:
    from tcluster.agent.runtime import host_mounts
    mounts, v2_controllers = host_mounts()
    systemd = Path("/run/systemd/system").is_dir()
    checks = [preflight.root(os.geteuid()), preflight.cgroups(mounts, v2_controllers),
              preflight.controllers(mounts, v2_controllers),
              preflight.delegation(mounts, v2_controllers, systemd, unit_delegate() if systemd else None,
                                   os.geteuid(), shutil.which("systemd-run") is not None),
              preflight.namespaces(*namespace_facts()), preflight.pidfds(pidfd_error()), shim_check()]
    return checks + master_checks(args)


def namespace_facts() -> tuple[set[str], dict[str, int]]:
    present = {kind for kind in (*preflight.NAMESPACES, "net") if Path(f"/proc/self/ns/{kind}").exists()}
    limits: dict[str, int] = {}
    for kind in preflight.NAMESPACES:
        try:
            limits[kind] = int(Path(f"/proc/sys/user/max_{kind}_namespaces").read_text())
        except (OSError, ValueError):
            pass
    return present, limits


def pidfd_error() -> str | None:
    try:
        os.close(os.pidfd_open(os.getpid()))
        return None
    except (OSError, AttributeError) as error:
        return str(error)


def unit_delegate() -> str | None:
    """Delegate= of tcl-agent.service as systemd has loaded it; None if it is not installed."""
    try:
        shown = subprocess.run(["systemctl", "show", "-p", "LoadState", "-p", "Delegate", "tcl-agent.service"],
                               capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    props = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
    return None if props.get("LoadState") != "loaded" else props.get("Delegate", "")


def shim_check() -> Check:
    from tcluster.agent.runtime.base import RuntimeSetupError
    from tcluster.agent.runtime.shimbin import shim_binary
    try:
        path = shim_binary()
    except RuntimeSetupError as error:
        return preflight.shim(None, str(error), None, "")
    try:
        done = subprocess.run([str(path)], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as error:
        return preflight.shim(str(path), str(error), None, "")
    return preflight.shim(str(path), None, done.returncode, done.stdout + done.stderr)


def master_checks(args: argparse.Namespace) -> list[Check]:
    """The node's identity, each master port it uses, and the clock against the master."""
    from tcluster.agent.joinstate import JoinedStateError, load_joined
    state_dir, configured = agent_config(args)
    try:
        joined = load_joined(state_dir)
    except JoinedStateError as error:
        return [preflight.joined(None, "", str(error))]
    if joined is not None:
        state, creds = joined
        client, agent, ca = state.master, state.agent_address, creds.ca_pem
    else:
        client = agent = configured or args.master
        ca = None
    checks = [preflight.joined(joined[0].node if joined else None, client)]
    addresses = dict.fromkeys([*_split(client), *_split(agent)])
    checks += [preflight.port("port", address, connect_error(address)) for address in addresses]
    checks.append(clock_check(_split(client)[0], ca))
    return checks


def agent_config(args: argparse.Namespace) -> tuple[Path, str | None]:
    """(state dir, the configured master or None) from --state-dir and the agent's config file."""
    state_dir, master = Path("/var/lib/tcluster/agent"), None
    if args.config is not None:
        from tcluster.agent.main import build_parser
        from tcluster.daemonkit.configfile import load_args
        loaded = load_args(build_parser(), ["--config", str(args.config)])   # ConfigError: a usage error
        state_dir = loaded.args.state_dir
        master = loaded.args.master if "master" in (loaded.config.values if loaded.config else {}) else None
    return (args.state_dir or state_dir), master


def _split(addresses: str) -> list[str]:
    return [a.strip() for a in addresses.split(",") if a.strip()]


def connect_error(address: str) -> str | None:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            return None
    except (OSError, ValueError) as error:
        return getattr(error, "strerror", None) or str(error)


def clock_check(address: str, ca_pem: bytes | None) -> Check:
    """The master's wall clock, from the metadata of a call any node may make (a Join without
    a token over TLS when joined; ListNodes on a plaintext master), against ours at the
    midpoint of the round trip."""
    import grpc

    from tcluster.security.channel import TLS_OPTIONS
    from tcluster.v1 import jobs_pb2, jobs_pb2_grpc, join_pb2, join_pb2_grpc
    if ca_pem is not None:
        channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(ca_pem), options=TLS_OPTIONS)
        call = join_pb2_grpc.NodeJoinStub(channel).Join.with_call
        request: object = join_pb2.JoinRequest()
    else:
        channel = grpc.insecure_channel(address)
        call = jobs_pb2_grpc.ClusterServiceStub(channel).ListNodes.with_call
        request = jobs_pb2.ListNodesRequest()
    with channel:
        sent = time.time()
        try:
            _, done = call(request, timeout=5)
            metadata = done.initial_metadata()
        except grpc.RpcError as error:
            metadata = error.initial_metadata() if hasattr(error, "initial_metadata") else None  # type: ignore[attr-defined]
            if not metadata:
                return preflight.clock(None, f"{error.code().name}: {error.details()}"[:200])  # type: ignore[attr-defined]
        received = time.time()
    stamp = dict(metadata or ()).get(MASTER_TIME_KEY)
    if stamp is None:
        return preflight.clock(None, "the master does not send its time (an older version?)")
    return preflight.clock(float(stamp) - (sent + received) / 2)
