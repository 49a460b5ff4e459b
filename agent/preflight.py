"""What `tcl doctor` checks on a node, as pure functions: facts in (file texts, probe
results), one Check out, saying OK or what to do. cli/doctor.py gathers the facts.

The checks follow what the agent uses: a cgroup backend with its controllers (detect.py),
delegation under systemd (the unit's Delegate=yes), the namespaces and pidfds the task
supervisor uses, the supervisor itself, root, and the master's ports and clock."""

from __future__ import annotations

from dataclasses import dataclass

from tcluster.agent.runtime.base import RuntimeSetupError
from tcluster.agent.runtime.detect import (
    V1_REQUIRED, V2_OPTIONAL, V2_REQUIRED, CgroupMounts, choose_mode,
)

OK, FAIL, SKIP = "OK", "FAIL", "SKIP"
NAMESPACES = ("pid", "mnt", "uts", "ipc")     # every task (shim.c); net only with task networks
MAX_SKEW_S = 2.0                              # fence and timeouts are seconds long; logs and usage carry wall times


@dataclass(frozen=True)
class Check:
    name: str
    status: str                 # OK, FAIL, or SKIP (could not be checked here; not an error)
    detail: str
    fix: str = ""

    def as_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "fix": self.fix}


def cgroups(mounts: CgroupMounts, v2_controllers: set[str]) -> Check:
    try:
        mode = choose_mode(mounts, v2_controllers)
    except RuntimeSetupError as error:
        return Check("cgroups", FAIL, "no usable cgroup hierarchy", str(error))
    if mode == "cgroup2":
        return Check("cgroups", OK, f"cgroup v2 at {mounts.v2}")
    hybrid = f" (a cgroup2 mount at {mounts.v2} too: hybrid)" if mounts.v2 else ""
    return Check("cgroups", OK, f"cgroup v1{hybrid}")


def controllers(mounts: CgroupMounts, v2_controllers: set[str]) -> Check:
    """The controllers the chosen backend needs, and the optional ones it would use."""
    try:
        mode = choose_mode(mounts, v2_controllers)
    except RuntimeSetupError:
        return Check("controllers", FAIL, "none usable (see cgroups)", "see the cgroups line")
    if mode == "cgroup2":
        missing_optional = [c for c in V2_OPTIONAL if c not in v2_controllers]
        note = f"; without {', '.join(missing_optional)} (no io.weight/io.stat)" if missing_optional else ""
        present = [c for c in (*V2_REQUIRED, *V2_OPTIONAL) if c in v2_controllers]
        return Check("controllers", OK, " ".join(present) + note)
    return Check("controllers", OK, " ".join(c for c in V1_REQUIRED if mounts.v1_path(c)))


def delegation(mounts: CgroupMounts, v2_controllers: set[str], systemd: bool, delegate: str | None,
               euid: int, systemd_run: bool = True) -> Check:
    """cgroup v2 under systemd: the agent's unit must have Delegate=yes, and systemd-run be
    there to ask for the tasks' delegated scope (agent/runtime/taskscope.py). `delegate`:
    `systemctl show -p Delegate` of the tcl-agent unit (None: not known)."""
    try:
        mode = choose_mode(mounts, v2_controllers)
    except RuntimeSetupError:
        return Check("delegation", SKIP, "no cgroup backend (see cgroups)")
    if mode == "cgroup1":
        return Check("delegation", OK, "not needed on cgroup v1 (the agent, as root, owns tcluster/ groups)")
    if not systemd:
        if euid != 0:
            return Check("delegation", FAIL, "not root and no systemd to delegate a subtree",
                         "run the agent as root")
        return Check("delegation", OK, "no systemd: the agent manages its tcluster/ subtree as root")
    if delegate is None:
        return Check("delegation", SKIP, "tcl-agent.service is not installed; its unit sets Delegate=yes")
    if delegate.strip().lower() in ("yes", "true", "1"):
        if not systemd_run:
            return Check("delegation", FAIL, "tcl-agent.service has Delegate=yes but systemd-run is missing: tasks "
                         "would go outside any delegated group (tcluster/<node>)", "install systemd's systemd-run")
        return Check("delegation", OK, "tcl-agent.service has Delegate=yes; tasks go to its delegated scope "
                     "tcluster.slice/tcl-tasks-<node>.scope")
    return Check("delegation", FAIL, f"tcl-agent.service has Delegate={delegate.strip() or 'no'}",
                 "set Delegate=yes in the unit (the packaged one does), then systemctl daemon-reload")


def namespaces(present: set[str], limits: dict[str, int]) -> Check:
    """/proc/self/ns/<kind> exists for each kind a task gets, and user.max_<kind>_namespaces
    (where the kernel has one) is not 0."""
    missing = [k for k in NAMESPACES if k not in present]
    if missing:
        return Check("namespaces", FAIL, f"this kernel lacks {', '.join(missing)} namespaces",
                     "a kernel with CONFIG_PID_NS, CONFIG_UTS_NS, CONFIG_IPC_NS; or run the agent with "
                     "--no-namespaces (tasks then share the node's PID and mount namespaces)")
    capped = [k for k in NAMESPACES if limits.get(k, 1) == 0]
    if capped:
        names = ", ".join(f"user.max_{k}_namespaces" for k in capped)
        return Check("namespaces", FAIL, f"{names} is 0",
                     f"sysctl -w user.max_{capped[0]}_namespaces=10000 (and in /etc/sysctl.d/)")
    net = "; net too" if "net" in present else "; no net namespaces (task networks unavailable)"
    return Check("namespaces", OK, " ".join(NAMESPACES) + net)


def pidfds(error: str | None) -> Check:
    if error is None:
        return Check("pidfd", OK, "pidfd_open works (task exits are seen without polling)")
    return Check("pidfd", FAIL, f"pidfd_open: {error}", "Linux 5.3 or later is needed")


def shim(path: str | None, error: str | None, rc: int | None, output: str) -> Check:
    """The task supervisor: found (shipped, cached, compiled or $TCL_SHIM) and it runs: with
    no argument it prints its usage and exits 2."""
    if path is None:
        return Check("shim", FAIL, "no task supervisor", error or "reinstall the package")
    if rc == 2 and "usage" in output:
        return Check("shim", OK, f"{path} runs")
    detail = f"{path} does not run: {error or f'exit {rc}: {output.strip()[:200]}'}"
    return Check("shim", FAIL, detail, "reinstall the package, or rebuild it with `python -m tcluster.agent.shimbuild`")


def root(euid: int) -> Check:
    if euid == 0:
        return Check("root", OK, "running as root (the agent needs it for cgroups and users)")
    return Check("root", FAIL, f"running as uid {euid}", "run tcl doctor (and the agent) as root")


def port(name: str, address: str, error: str | None) -> Check:
    if error is None:
        return Check(name, OK, f"{address} accepts connections")
    host, _, number = address.rpartition(":")
    return Check(name, FAIL, f"cannot connect to {address}: {error}",
                 f"is tcl-master running there? is TCP port {number} open between this node and {host}?")


def clock(skew_s: float | None, why_not: str = "") -> Check:
    """skew_s: the master's clock minus this node's (at the request's midpoint)."""
    if skew_s is None:
        return Check("clock", SKIP, f"the master's clock could not be read ({why_not})" if why_not else
                     "no master to compare with")
    text = f"{abs(skew_s):.2f}s {'behind' if skew_s > 0 else 'ahead of'} the master"
    if abs(skew_s) <= MAX_SKEW_S:
        return Check("clock", OK, text)
    return Check("clock", FAIL, text, "synchronise clocks: timedatectl set-ntp true (or chrony) on the node "
                 "and the master")


def joined(node: str | None, master: str, error: str | None = None) -> Check:
    if error is not None:
        return Check("identity", FAIL, error, "join again: tcl-agent join --master HOST:PORT --token TOKEN")
    if node is None:
        return Check("identity", SKIP, f"not joined: a plaintext agent for {master} (no mutual TLS)")
    return Check("identity", OK, f"joined as node {node}; master {master}")
