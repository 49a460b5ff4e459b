"""Runs inside the guest (systemd, cgroup v2, no network), from guest_checks.py (run_all),
for tests/vm/test_package.py: the Debian package built on the host, as an operator would use it.

1. `dpkg -i` the first packages (tcluster, tcluster-master); `tcl-master init`, the master
   unit (as the tcluster user: its systemd-analyze security score is recorded), a join
   token; tcl-gm with the shipped gm.toml (no LMs: exit 2) ends failed without restarts.
2. /opt/tcluster/install.sh (no package: the installed one) joins the node with --token-file,
   runs `tcl doctor` and starts the agent unit; a job's task runs.
3. install.sh with rebuilt packages of a higher version while the task runs: postinst
   restarts the daemons; the agent runs the new version, the task survives and succeeds,
   the operator's edited /etc/tcluster/agent.toml is untouched.
4. The agent's heartbeat loop is made to hang (the test-only trigger in agent.toml): the
   unit's watchdog kills it and systemd starts it again.
5. `systemctl stop` on the agent's task scope ends its task; the next task gets a new scope.
6. `dpkg -r` keeps config and state and stops the idle scope; `dpkg -P` removes them (both packages).
Writes package-results.json into the share; journals and tool outputs beside it."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

SHARE = Path("/mnt/share")
ETC = Path("/etc/tcluster")
MASTER_DIR = Path("/var/lib/tcluster/master")
NODE = "vm3"
HANG = Path("/run/tcl-hang")      # agent.toml's test_hang_file
GO = Path("/run/tcl-go")          # the task waits for it (visible in its mount namespace: only /tmp is private)
UNITS = ("tcl-agent.service", "tcl-master.service", "tcl-gm.service")
SCOPE = f"tcl-tasks-{NODE}.scope"          # where the agent's tasks live (agent/runtime/taskscope.py)
SCOPE_GROUP = Path("/sys/fs/cgroup/tcluster.slice") / SCOPE
ENV = {**os.environ, "TCL_MASTER": "127.0.0.1:7070", "TCL_CA": str(MASTER_DIR / "pki" / "ca.crt"),
       "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def sh(*args: str, timeout: float = 600, log: str = "") -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=ENV, cwd="/")
    if log:
        (SHARE / log).write_text(f"$ {' '.join(args)}\n{done.stdout}{done.stderr}[rc={done.returncode}]\n")
    print(f"[guest] {' '.join(args)[:90]} -> {done.returncode} in {time.monotonic() - started:.1f}s", flush=True)
    return done


def wait_until(check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (ValueError, KeyError, IndexError, subprocess.SubprocessError, OSError):
            pass
        time.sleep(1)
    return None


def prop(unit: str, name: str) -> str:
    return sh("systemctl", "show", "-p", name, "--value", unit).stdout.strip()


def job(job_id: str) -> dict[str, Any]:
    return json.loads(sh("tcl", "status", job_id, "-o", "json").stdout)


def node_ready() -> bool:
    return any(n["name"] == NODE and n["state"] == "READY" for n in json.loads(sh("tcl", "nodes", "-o", "json").stdout))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def first_install(first: list[Path]) -> dict[str, Any]:
    out: dict[str, Any] = {"dpkg_rc": sh("dpkg", "-i", *map(str, first), log="dpkg-install.log").returncode}
    out["version"] = sh("tcl-agent", "--version").stdout.strip()
    out["on_path"] = [Path("/usr/bin", n).exists() for n in ("tcl", "tcl-master", "tcl-agent")]
    # --man=no: the units name their man pages (Documentation=man:...), and the guest has no man.
    verify = sh("systemd-analyze", "verify", "--man=no", *(f"/lib/systemd/system/{u}" for u in UNITS))
    out["verify"] = (verify.returncode, verify.stderr.strip())
    init = sh("tcl-master", "init", "--data-dir", str(MASTER_DIR), log="master-init.log")
    admin = [line.strip() for line in init.stdout.splitlines() if line.strip().startswith("tcu.")]
    ENV["TCL_TOKEN"] = admin[0] if admin else ""
    out["master_start_rc"] = sh("systemctl", "start", "tcl-master.service").returncode   # returns at READY=1
    out.update(least_privilege())
    token = sh("tcl-master", "join-token", "create", "--data-dir", str(MASTER_DIR))
    out["token_rc"] = token.returncode
    # The operator's edits: capacity, and the test-only hang trigger.
    agent_toml = ETC / "agent.toml"
    agent_toml.write_text(agent_toml.read_text() + f'\ncpus = 2\nmemory = "1Gi"\ntest_hang_file = "{HANG}"\n')
    token_file = Path("/run/tcl-join-token")          # the token in a file only the operator reads, never in argv
    token_file.touch(mode=0o600)
    token_file.write_text(token.stdout.strip() + "\n")
    install = sh("sh", "/opt/tcluster/install.sh", "--master", "127.0.0.1:7070", "--token-file", str(token_file),
                 "--node", NODE, timeout=300, log="install-sh.log")
    out["install_sh_rc"] = install.returncode
    out["doctor_failed"] = [line for line in install.stdout.splitlines() if line.startswith("FAIL")]
    out["agent_active"] = prop("tcl-agent.service", "ActiveState")
    out["node_ready"] = bool(wait_until(node_ready, 90))
    return out


def least_privilege() -> dict[str, Any]:
    """Who the master runs as, who owns the CA key, systemd-analyze's scores, and a config
    error (tcl-gm with the shipped gm.toml names no LM: exit 2) that must not restart-loop."""
    pid = prop("tcl-master.service", "MainPID")
    key = MASTER_DIR / "pki" / "ca.key"
    out: dict[str, Any] = {
        "master_user": pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name if pid not in ("", "0") else "",
        "ca_key": f"{pwd.getpwuid(key.stat().st_uid).pw_name} {key.stat().st_mode & 0o777:o}" if key.exists() else ""}
    scores = {}
    for unit in ("tcl-master.service", "tcl-gm.service", "tcl-agent.service"):
        text = sh("systemd-analyze", "security", "--no-pager", unit, log=f"security-{unit}.log").stdout
        match = re.search(r"Overall exposure level for \S+: (\d+\.\d)", text)
        scores[unit] = float(match.group(1)) if match else None
    out["security"] = scores
    out["gm_start_rc"] = sh("systemctl", "start", "tcl-gm.service").returncode
    time.sleep(8)          # RestartSec=2: a loop would have restarted it by now
    out["gm_after_exit_2"] = {name: prop("tcl-gm.service", name) for name in ("ActiveState", "NRestarts", "ExecMainStatus")}
    sh("systemctl", "reset-failed", "tcl-gm.service")
    return out


def scope_state() -> dict[str, Any]:
    """The agent's delegated task scope, as systemd and cgroupfs show it."""
    keeper = SCOPE_GROUP / "keeper" / "cgroup.procs"
    return {**{name: prop(SCOPE, name) for name in ("ActiveState", "Delegate", "Slice", "ControlGroup")},
            "keeper": keeper.read_text().split() if keeper.exists() else []}


def upgrade_while_a_task_runs(second: list[Path]) -> dict[str, Any]:
    # The task prints its own cgroup: in the agent's delegated scope, not its unit (the unit
    # restarts while the task runs, and the new agent re-adopts it).
    submitted = sh("tcl", "submit", "--cpu", "0.5", "--mem", "64Mi", "--", "sh", "-c",
                   f"cat /proc/self/cgroup; while [ ! -e {GO} ]; do sleep 1; done; echo done")
    job_id = submitted.stdout.strip()
    out: dict[str, Any] = {"submitted": submitted.returncode == 0,
                           "running": bool(wait_until(lambda: job(job_id)["state"] == "RUNNING", 120))}
    before = {"agent_pid": prop("tcl-agent.service", "MainPID"), "toml": digest(ETC / "agent.toml")}
    upgrade = sh("sh", "/opt/tcluster/install.sh", *map(str, second), timeout=600, log="upgrade.log")
    out.update(install_sh_rc=upgrade.returncode, dpkg_version=sh("dpkg-query", "-W", "-f=${Version}", "tcluster").stdout,
               version=sh("tcl-agent", "--version").stdout.strip(), agent_pid_before=before["agent_pid"],
               agent_pid_after=prop("tcl-agent.service", "MainPID"), agent_active=prop("tcl-agent.service", "ActiveState"),
               toml_untouched=digest(ETC / "agent.toml") == before["toml"],
               running_after=job(job_id)["state"] if job_id else "")
    out["node_ready"] = bool(wait_until(node_ready, 120))
    GO.write_text("")
    out["succeeded"] = bool(wait_until(lambda: job(job_id)["state"] == "SUCCEEDED", 120))
    final = job(job_id)
    out["attempts"] = [t.get("attempt") for t in final.get("tasks", [])]
    out["logs"] = sh("tcl", "logs", job_id).stdout
    out["agent_cgroup"] = main_cgroup("tcl-agent.service")
    out["scope"] = scope_state()
    journal = sh("journalctl", "--no-pager", "-u", "tcl-agent").stdout
    # `--version` is "tcl-agent 0.1.0 (commit abc)"; the start line names the bare version.
    out["new_agent_started"] = f"tcl-agent {out['version'].split()[1]} {NODE}: runtime" in journal
    return out


def main_cgroup(unit: str) -> str:
    pid = prop(unit, "MainPID")
    return Path(f"/proc/{pid}/cgroup").read_text().strip() if pid and pid != "0" else ""


def watchdog_restart() -> dict[str, Any]:
    pid = prop("tcl-agent.service", "MainPID")
    since = sh("date", "+%Y-%m-%d %H:%M:%S").stdout.strip()
    HANG.write_text("")
    # WatchdogSec=30: the kill comes 30 s after the last ping; the restart 2 s after that.
    restarted = wait_until(lambda: prop("tcl-agent.service", "MainPID") not in (pid, "0", ""), 150)
    journal = sh("journalctl", "--no-pager", "-u", "tcl-agent", "--since", since).stdout
    (SHARE / "journal-watchdog.log").write_text(journal)
    return {"hung": "test hang:" in journal, "restarted": bool(restarted),
            "watchdog_in_journal": "watchdog timeout" in journal.lower(),
            "active_after": wait_until(lambda: prop("tcl-agent.service", "ActiveState") == "active", 60) is not None,
            "node_ready_after": bool(wait_until(node_ready, 120))}


def stop_the_scope() -> dict[str, Any]:
    """`systemctl stop` on the task scope ends the node's tasks; the next task gets a new scope."""
    submitted = sh("tcl", "submit", "--cpu", "0.5", "--mem", "64Mi", "--", "sleep", "600")
    first = submitted.stdout.strip()
    out: dict[str, Any] = {"running": bool(wait_until(lambda: job(first)["state"] == "RUNNING", 120))}
    out["stop_rc"] = sh("systemctl", "stop", SCOPE).returncode
    out["first_state"] = wait_until(lambda: job(first)["state"] if job(first)["state"] != "RUNNING" else "", 120)
    second = sh("tcl", "submit", "--cpu", "0.5", "--mem", "64Mi", "--", "cat", "/proc/self/cgroup").stdout.strip()
    out["second_succeeded"] = bool(wait_until(lambda: job(second)["state"] == "SUCCEEDED", 120))
    out["second_logs"] = sh("tcl", "logs", second).stdout
    out["scope"] = scope_state()
    return out


def remove_and_purge() -> dict[str, Any]:
    (SHARE / "journal-package.log").write_text(
        sh("journalctl", "--no-pager", "-u", "tcl-agent", "-u", "tcl-master").stdout)
    removed = sh("dpkg", "-r", "tcluster-master", "tcluster", log="dpkg-remove.log")
    out: dict[str, Any] = {
        "remove_rc": removed.returncode, "opt_left": Path("/opt/tcluster").exists(),
        "bin_left": Path("/usr/bin/tcl").exists(), "units_left": Path("/lib/systemd/system/tcl-agent.service").exists(),
        "agent_running": prop("tcl-agent.service", "ActiveState") == "active",
        "config_kept": (ETC / "agent.toml").exists() and (ETC / "master.toml").exists(),
        "state_kept": Path("/var/lib/tcluster/agent/joined.json").exists() and (MASTER_DIR / "pki").exists()}
    purged = sh("dpkg", "-P", "tcluster-master", "tcluster", log="dpkg-purge.log")
    out.update(purge_rc=purged.returncode, etc_left=ETC.exists(), state_left=Path("/var/lib/tcluster").exists(),
               dpkg_status=sh("dpkg-query", "-W", "-f=${Status}", "tcluster").stdout.strip())
    groups = Path("/sys/fs/cgroup/tcluster") / NODE
    out["leftover_groups"] = sorted(p.name for p in groups.iterdir() if p.is_dir()) if groups.exists() else []
    out["scope_left"] = SCOPE_GROUP.exists()       # dpkg -r stopped the idle scope, and its keeper
    return out


def wait_for_packages(pkg: Path, timeout_s: float = 1200) -> dict[str, Any]:
    """The host builds the packages while the guest runs its other checks, then writes
    pkg/ready: {"first", "second"} (file names, install order) or {"error"}."""
    ready = wait_until(lambda: json.loads((pkg / "ready").read_text()), timeout_s)
    return ready if ready else {"error": f"no {pkg / 'ready'} after {timeout_s}s"}


def run_all(pkg: Path) -> dict[str, Any]:
    """Every step in order, each one's results (or the exception it raised) and seconds
    written to package-results.json as soon as it ends: the host's tests say which broke."""
    waited = time.monotonic()
    ready = wait_for_packages(pkg)
    results: dict[str, Any] = {"packages": ready, "waited_for_packages_s": round(time.monotonic() - waited, 1)}
    (SHARE / "package-results.json").write_text(json.dumps(results, indent=1))
    if "error" in ready:
        return results
    first, second = [pkg / name for name in ready["first"]], [pkg / name for name in ready["second"]]
    steps = (("install", lambda: first_install(first)), ("upgrade", lambda: upgrade_while_a_task_runs(second)),
             ("watchdog", watchdog_restart), ("scope", stop_the_scope), ("remove", remove_and_purge))
    for name, step in steps:
        started = time.monotonic()
        try:
            results[name] = step()
        except Exception as error:     # recorded: the host's test says which step broke
            results[name] = {"error": repr(error)}
        results[name]["seconds"] = round(time.monotonic() - started, 1)
        (SHARE / "package-results.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1), flush=True)
    return results
