"""The agent's settings: one model, loaded once in main and passed down."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tcluster.agent.runas import parse_uid_ranges
from tcluster.agent.runtime.base import DEFAULT_PIDS_MAX
from tcluster.domain.constraints import parse_labels
from tcluster.daemonkit.runner import one_of
from tcluster.domain.errors import InvalidArgument
from tcluster.daemonkit.leaders import join_addresses, parse_addresses

_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
RUNTIMES = ("auto", "cgroup2", "cgroup1", "process")


class AgentSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    master: str = "127.0.0.1:7070"             # or a list: a:7071,b:7071 (HA masters)
    node: str = Field(default_factory=socket.gethostname)
    cpus: float = Field(gt=0)                   # declared capacity
    memory_bytes: int = Field(gt=0)
    reserve_cpus: float = Field(0.0, ge=0)      # kept back for the agent itself
    reserve_memory_bytes: int = Field(0, ge=0)
    labels: dict[str, str] = Field(default_factory=dict)
    state_dir: Path = Path("/var/lib/tcluster/agent")
    runtime: str = "auto"
    allow_process_runtime: bool = False         # only `tcl dev` sets this
    cgroup_parent: str | None = None            # scope | delegated | a path; None: scope under systemd, else tcluster/<node>
    heartbeat_interval_s: float = Field(1.0, gt=0, le=60)   # until the master says otherwise
    # Usage reports at most this often (a report still goes at once when something changed);
    # 0: the master's choice from the cluster size (Registered.usage_interval_s). Issue 26.
    usage_interval_s: float = Field(0.0, ge=0, le=3600)
    report_flush_s: float = Field(0.005, ge=0, le=1)         # task reports raised this close go in one message
    pids_max: int = Field(DEFAULT_PIDS_MAX, gt=0)          # per task; a ceiling: a job may only lower it
    kill_grace_s: float = Field(10.0, ge=0)
    log_max_bytes: int = Field(64 * 2**20, ge=0)             # per log file before rotation; 0 = no cap
    task_retention_s: float = Field(3 * 86400.0, ge=0)       # finished tasks' log directories kept this long
    fence_after_s: float = Field(0.0, ge=0)                  # until the master says; 0 = no fence
    docker_host: str | None = None                           # a docker engine for image tasks; None = none
    networks: bool = False                                   # own network namespaces for tasks (none, bridge)
    net_bps: float = Field(0.0, ge=0)                        # declared egress bandwidth (the `net` resource)
    net_subnet: str = "10.88.0.0/24"                         # task addresses on this node's bridge
    masquerade: bool = False                                 # NAT the subnet out of the node (nftables)
    gpus: str = ""                                           # --gpus: all | N | 0,2; "" = none (or all declared)
    gpu_devices: str = ""                                    # --gpu-devices: declared device nodes, comma-separated
    # Tasks outlive the agent (their shims record their exits) and a restarted agent
    # re-adopts them; only `tcl dev` stops its tasks with it.
    kill_tasks_on_exit: bool = False
    # Like Nomad's exec driver: tasks that name no user run as `nobody`; root only if allowed.
    default_user: str = "nobody"
    allow_root: bool = False
    deny_uids: str = "0-999"                    # never run tasks as these (system users), except nobody
    namespaces: bool = True                     # own PID, mount, UTS, IPC namespaces per task
    unlimited_memory: bool = True               # run tasks without a memory limit (`tcl submit --mem unlimited`)
    reconnect_max_s: float = Field(5.0, gt=0)
    # After `tcl-agent join`: STATE_DIR/pki; the stream then only ever uses mutual TLS.
    tls_dir: Path | None = None
    # Test only (tests/vm): the heartbeat loop hangs once this file appears, as a deadlock
    # would, so the systemd watchdog's restart can be shown. None: never looked at.
    test_hang_file: Path | None = None

    @field_validator("node")
    @classmethod
    def _node_name(cls, value: str) -> str:
        if not _NODE.match(value):
            raise ValueError(f"{value!r} is not a valid node name; use 1-63 of A-Z a-z 0-9 _ . - starting with a letter or digit")
        return value

    @field_validator("master")
    @classmethod
    def _master(cls, value: str) -> str:
        """One address or a comma-separated list (every master of an HA cluster)."""
        try:
            return join_addresses(parse_addresses(value, "master"))
        except InvalidArgument as error:
            raise ValueError(str(error)) from None

    @field_validator("deny_uids")
    @classmethod
    def _deny_uids(cls, value: str) -> str:
        parse_uid_ranges(value)
        return value

    @property
    def denied_uids(self) -> tuple[tuple[int, int], ...]:
        return parse_uid_ranges(self.deny_uids)

    @field_validator("runtime")
    @classmethod
    def _runtime(cls, value: str) -> str:
        return one_of(value, RUNTIMES, "runtime")

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        parse_labels(",".join(f"{k}={v}" for k, v in value.items()))
        return value
