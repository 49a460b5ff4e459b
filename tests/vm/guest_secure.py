"""Runs inside the guest, from guest_checks.py: the secure join flow with the systemd units,
across a real reboot of the guest.

Before the reboot: `tcl-master init` in the master unit's data dir, a join token, `tcl-agent
join` into the agent unit's state dir, both units enabled and started with no token and
no --master/--node for the agent, the node READY. Then `systemctl reboot` (qemu resets the
guest on the same disk). After it: the units come up by themselves and the node is READY
again, over mutual TLS with the certificate it got before the reboot."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import grpc

from tcluster.security.channel import TLS_OPTIONS
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc

SHARE = Path("/mnt/share")
BIN = Path(sys.executable).parent
MASTER_DIR = Path("/var/lib/tcluster/master")
AGENT_DIR = Path("/var/lib/tcluster/agent")
REBOOT_MARKER = SHARE / "secure-reboot-pending"
NODE = "vm2"
UNITS = ("tcl-master.service", "tcl-agent.service")
ADMIN_TOKEN = "admin.token"


def _sh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120)


def node_state(node: str = NODE) -> str:
    """The node's state as the master reports it over TLS (trusting only the cluster CA)."""
    ca = (MASTER_DIR / "pki" / "ca.crt").read_bytes()
    creds = grpc.composite_channel_credentials(grpc.ssl_channel_credentials(ca), grpc.access_token_call_credentials(
        (MASTER_DIR / ADMIN_TOKEN).read_text().strip()))
    with grpc.secure_channel("127.0.0.1:7070", creds, options=TLS_OPTIONS) as channel:
        nodes = jobs_pb2_grpc.ClusterServiceStub(channel).ListNodes(jobs_pb2.ListNodesRequest(), timeout=10).nodes
    return next((n.state for n in nodes if n.name == node), "")


def wait_ready(timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if node_state() == "READY":
                return True
        except (grpc.RpcError, OSError):
            pass    # the master is still starting
        time.sleep(1)
    return False


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def before_reboot() -> dict[str, object]:
    """Sets up the secure cluster on the units; True in 'reboot' means: reboot now."""
    subprocess.run(["systemctl", "stop", *UNITS], check=False)
    Path("/etc/tcluster/master.env").write_text('TCL_MASTER_ARGS="--listen 127.0.0.1:7070 --heartbeat-interval-s 0.5"\n')
    init = _sh(str(BIN / "tcl-master"), "init", "--data-dir", str(MASTER_DIR))
    out: dict[str, object] = {"init_rc": init.returncode, "init_err": init.stderr[-500:]}
    admin = re.search(r"^\s+(tcu\.\S+)$", init.stdout, re.M)    # the first admin's token: kept for node_state
    if admin is not None:
        (MASTER_DIR / ADMIN_TOKEN).write_text(admin.group(1))
        (MASTER_DIR / ADMIN_TOKEN).chmod(0o600)
    subprocess.run(["systemctl", "start", "tcl-master.service"], check=False)
    token = _sh(str(BIN / "tcl-master"), "join-token", "create", "--data-dir", str(MASTER_DIR), "--labels", "site=vm")
    out["token_rc"] = token.returncode
    env = Path("/etc/tcluster/agent.env").read_text().splitlines()
    shim = [line for line in env if line.startswith("TCL_SHIM=")]
    Path("/etc/tcluster/agent.env").write_text("\n".join(['TCL_AGENT_ARGS="--cpus 2 --memory 1Gi"', *shim]) + "\n")
    joined = _sh(str(BIN / "tcl-agent"), "join", "--master", "127.0.0.1:7070", "--token", token.stdout.strip(),
                 "--node", NODE, "--state-dir", str(AGENT_DIR))
    out.update(join_rc=joined.returncode, join_out=(joined.stdout + joined.stderr)[-500:])
    out["key_mode"] = oct((AGENT_DIR / "pki" / "node.key").stat().st_mode & 0o777) if joined.returncode == 0 else ""
    out["enable_rc"] = subprocess.run(["systemctl", "enable", *UNITS], capture_output=True).returncode
    subprocess.run(["systemctl", "start", "tcl-agent.service"], check=False)
    out["ready_before"] = wait_ready(90)
    out["reboot"] = bool(out["ready_before"] and out["enable_rc"] == 0)
    out["boot_id"] = boot_id()
    return out


def after_reboot() -> dict[str, object]:
    out: dict[str, object] = {"ready_after": wait_ready(180)}
    out["enabled"] = _sh("systemctl", "is-enabled", *UNITS).stdout.split()
    journal = _sh("journalctl", "-b", "--no-pager", "-u", "tcl-agent", "-u", "tcl-master").stdout
    (SHARE / "journal-after-reboot.log").write_text(journal)
    # The banner: `tcl-agent VERSION NODE: runtime ..., master ... (mutual TLS)`.
    out["agent_mtls"] = re.search(rf"tcl-agent \S+ {NODE}: runtime .*\(mutual TLS\)", journal) is not None
    out["registered"] = "registered with 127.0.0.1:7071 as vm2" in journal
    out["boot_id"] = boot_id()
    subprocess.run(["systemctl", "stop", *UNITS], check=False)
    return out


def reboot_now() -> None:
    REBOOT_MARKER.write_text("1")
    subprocess.run(["systemctl", "reboot"], check=False)
    time.sleep(600)   # stopped by the reboot; the runner must not reach its poweroff


def finish_after_reboot() -> int:
    """The second boot's run: add the after-reboot checks to results.json."""
    REBOOT_MARKER.unlink()
    results = json.loads((SHARE / "results.json").read_text())
    started = time.monotonic()
    results["secure"]["after"] = after_reboot()
    results.setdefault("timings", {}).update(boot_after_reboot=round(float(Path("/proc/uptime").read_text().split()[0]), 1),
                                             secure_after_reboot=round(time.monotonic() - started, 1))
    (SHARE / "results.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results["secure"], indent=1))
    return 0
