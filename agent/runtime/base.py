"""The runtime seam: one small interface every backend (cgroup2, cgroup1, process,
later docker) implements. The agent only talks to a `Runtime`; tests swap in a fake.

A task's container is named by its `key` ("<task_id>.<attempt>", unique on a node).
Start spawns a small supervisor (the shim) that puts the task in its container before
exec, waits for it and records its exit, so an exit is never lost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tcluster.domain.resources import Resources

from .devices import DeviceRule

DEFAULT_PIDS_MAX = 4096


class RuntimeSetupError(Exception):
    """The backend cannot work on this host; the message says what is missing and how to fix it."""


class LaunchError(Exception):
    """This task could not be started (bad user, limit refused, exec failed). The
    message is the task's failure reason; the agent keeps serving."""


@dataclass(frozen=True)
class TaskSpec:
    key: str                              # container name, unique on this node
    task_id: str
    attempt: int
    command: tuple[str, ...]
    resources: Resources
    stdout_path: str
    stderr_path: str
    env: tuple[tuple[str, str], ...] = ()
    user: str = ""                        # "" = the agent's own user
    workdir: str = ""                     # --workdir; "" = submit_dir
    submit_dir: str = ""                  # where tcl submit ran; "" = /tmp in its namespace (without: home, else /)
    pids_max: int = DEFAULT_PIDS_MAX
    cpu_limit: float = 0.0                # hard cap in cores; 0 = none
    swap_bytes: int = 0                   # swap allowed beyond memory; 0 = none, -1 = unlimited
    namespaces: bool = True               # own PID, mount (private /tmp), UTS and IPC namespaces
    log_max_bytes: int = 0                # per log file before it rotates to <file>.1; 0 = no cap
    image: str = ""                       # docker image (the docker backend); "" = native
    network: str = "host"                 # host | none | bridge
    net_rate_bps: float = 0.0             # egress bandwidth guaranteed (HTB rate); 0 = none
    net_ceil_bps: float = 0.0             # egress cap when the link is idle (HTB ceil); 0 = the rate
    # Device nodes the task may open (devices.py); None: not confined (a node without GPUs).
    devices: tuple[DeviceRule, ...] | None = None
    gpus: tuple[int, ...] = ()            # the agent's indices of the GPUs bound to the task
    gpu_paths: tuple[str, ...] = ()       # their device nodes, then the shared control nodes (docker)
    gpu_driver: str = ""                  # "nvidia" when NVML found them: docker device requests
    # The user's output files (agent/outputs.py), as the task sees them: relative to its
    # working directory, opened by the shim as its user; "" = the agent's log file.
    stdout_file: str = ""
    stderr_file: str = ""
    output_append: bool = False           # append to them (else truncate)
    script: str = ""                      # a job script, handed to the task on SCRIPT_FD
    # The agent's fence lease (agent/fence.py): the shim kills the task itself once it runs
    # out, with or without an agent. "" = never fenced (a job the master does not re-place).
    lease_path: str = ""


@dataclass(frozen=True)
class Started:
    pid: int            # the supervisor's pid
    started_at: float   # unix seconds, once the task process has exec'd
    exit_fd: int        # becomes readable when the task has ended; the caller closes it


@dataclass(frozen=True)
class ExitStatus:
    exit_code: int | None      # None when killed by a signal
    signal: int = 0
    finished_at: float = 0.0
    oom_killed: bool = False
    reason: str = ""           # e.g. "OOMKilled", "exec failed: No such file or directory"
    fenced: bool = False       # the shim stopped it: the fence lease ran out (no agent renewed it)


@dataclass(frozen=True)
class RawUsage:
    """Counters read from the container's cgroup files at `at` (cumulative unless noted)."""
    at: float
    cpu_ns: int = 0
    user_ns: int = 0
    system_ns: int = 0
    memory_bytes: int = 0          # current
    memory_peak_bytes: int = 0     # 0 when the kernel keeps none (v2 before memory.peak)
    anon_bytes: int = 0            # current
    file_bytes: int = 0            # current
    inactive_file_bytes: int = -1  # current (memory.stat inactive_file); -1 where not read
    pids: int = 0                  # current
    oom_kills: int = 0
    throttled_ns: int = 0
    nr_throttled: int = 0
    swap_bytes: int = 0            # current
    io_read_bytes: int = 0
    io_write_bytes: int = 0
    pids_max_hits: int = 0
    net_tx_bytes: int | None = None  # on the task's own link (bridge/none networks); None without one
    net_rx_bytes: int | None = None
    mono: float = 0.0              # monotonic time of the sample: rates never jump with the wall clock


class Runtime(Protocol):
    name: str

    def setup(self) -> None:
        """Create this node's subtree; raise RuntimeSetupError saying what is wrong."""

    def start(self, spec: TaskSpec) -> Started:
        """Create the container, apply limits, start the task inside it. Raises LaunchError."""

    def adopt(self, key: str) -> Started | None:
        """After an agent restart: watch a container found on disk again. None when its
        task has ended meanwhile (exit_status then says how)."""

    def exit_status(self, key: str) -> ExitStatus:
        """The recorded exit of a task whose exit_fd became readable."""

    def sample(self, key: str) -> RawUsage | None:
        """Current counters, or None when the container no longer exists."""

    def signal(self, key: str, signum: int) -> None:
        """Send a signal to every process in the container. SIGKILL kills the whole
        container at once (cgroup.kill, or freeze/kill/thaw): nothing escapes by forking."""

    def remove(self, key: str) -> None:
        """Kill whatever is left in the container and delete it. Idempotent."""

    def containers(self) -> list[str]:
        """Keys of the containers that exist under this node's subtree."""

    def close(self) -> None:
        """Release what setup took (remove the node subtree if empty)."""
