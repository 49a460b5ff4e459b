"""Domain values shared by master, agent and CLI. Frozen: change with `replace`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tcluster.domain.bounds import (MAX_ARGS, MAX_CONSTRAINTS, MAX_ENV, MAX_LABELS, MAX_NAME_BYTES, MAX_SPEC_BYTES,
                                    QUOTE_CHARS, check_count, check_name, quote)
from tcluster.domain.arrays import IndexSet, parse_array
from tcluster.domain.dependency import parse_dependency
from tcluster.domain.ceilings import Ceilings
from tcluster.domain.constraints import parse_constraints
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.nodeorders import READY_OPS, NodeOps
from tcluster.domain.outputfiles import check_pattern
from tcluster.domain.scripts import check_script
from tcluster.domain.resources import Resources
# The model's names, re-exported (`X as X`): importers take the states and usage from here.
from tcluster.domain.states import JobState as JobState, NodeState as NodeState, TaskState as TaskState
from tcluster.domain.taskusage import TaskUsage as TaskUsage
from tcluster.domain.taskusage import NO_USAGE

MAX_TASKS_PER_JOB = 10_000
MAX_ARRAY_TASKS = 10_000_000      # an array's indexes are ranges: its cost grows with what runs
MAX_RETRIES = 100
NETWORK_MODES = ("", "host", "none", "bridge")
ON_PREEMPT = ("", "requeue", "cancel")
OPEN_MODES = ("", "truncate", "append")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_QUEUE = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
DEFAULT_QUEUE = "default"


def spec_size(spec: JobSpec) -> int:
    """The bytes of a spec's strings (command, names, env, labels, constraints), unencoded."""
    parts = [*spec.command, spec.name, spec.queue, spec.user, spec.workdir, spec.submit_dir, spec.image,
             *spec.constraints, spec.stdout_file, spec.stderr_file, spec.script]
    parts += [k + v for k, v in spec.env] + [k + v for k, v in spec.labels]
    return sum(len(p.encode("utf-8", "surrogatepass")) for p in parts)


def check_spec_bounds(spec: JobSpec) -> None:
    """Sizes only; the meaning of each field is JobSpec.validate's business, and the size of
    its stored record the codec's (tcluster/wire/codec.py check_spec)."""
    check_count("command", spec.command, MAX_ARGS)
    check_count("env", spec.env, MAX_ENV)
    check_count("labels", spec.labels, MAX_LABELS)
    check_count("constraints", spec.constraints, MAX_CONSTRAINTS)
    for field_name, value in (("queue", spec.queue), ("user", spec.user), ("image", spec.image),
                              ("workdir", spec.workdir), ("submit_dir", spec.submit_dir)):
        check_name(field_name, value, 4096 if field_name in ("workdir", "submit_dir") else MAX_NAME_BYTES)
    for key, value in spec.labels:
        check_name("labels", key)
        check_name(f"labels.{key[:QUOTE_CHARS]}", value)
    for text in spec.constraints:
        check_name("constraints", text, 1024)
    size = spec_size(spec)
    if size > MAX_SPEC_BYTES:
        raise InvalidArgument("spec", f"is {size} bytes of command, env and labels; at most {MAX_SPEC_BYTES} allowed")
    for key, value in spec.env:
        if "\x00" in value:
            raise InvalidArgument(f"env.{key[:QUOTE_CHARS]}", "value contains a NUL byte")


@dataclass(frozen=True)
class JobSpec:
    command: tuple[str, ...]
    resources: Resources
    name: str = ""
    queue: str = DEFAULT_QUEUE
    tasks: int = 1
    env: tuple[tuple[str, str], ...] = ()
    user: str = ""
    workdir: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    constraints: tuple[str, ...] = ()     # on node labels, e.g. "rack=r1"; all must hold
    weight: float = 1.0                   # the job's weight among its queue's jobs (fairness)
    cpu_limit: float = 0.0                # hard cap in cores per task; 0 = none
    swap: int = 0                         # swap bytes per task beyond memory; 0 = none, -1 = unlimited
    pids_max: int = 0                     # processes + threads per task; 0 = the agent's; never above it
    retries: int = 0                      # a FAILED or LOST task runs again up to this many times
    log_max_bytes: int = 0                # per log file before rotation; 0 = the agent's; never above it
    image: str = ""                       # docker image; "" = the node's native runtime
    network: str = ""                     # host | none | bridge; "" = host (bridge if `net` is asked)
    net_limit: float = 0.0                # egress cap in bits/s when the link is idle; 0 = the request
    owner: str = ""                       # the submitting user: set by the master, never taken from a client
    on_preempt: str = ""                  # requeue (default) | cancel: what a preempted task does
    time_limit_s: float = 0.0             # a task running this long ends FAILED (TimeLimit); 0 = none
    array: str = ""                       # Slurm's array form (0-999%50): tasks are these indexes
    dependency: str = ""                  # Slurm's form: afterok:J1:J2,afterany:J3 (? for or)
    keep_unmet: bool = False              # a dependency that can no longer be met keeps the job waiting
    gang: bool = False                    # all tasks start in one round, or none
    gang_timeout_s: float = 0.0           # 0 = 300: a gang not all RUNNING by then is stopped and requeued
    gang_restart: bool = False            # a failed member restarts the gang (else the job FAILS)
    # The client's idempotency key: a Submit retried with the same one (same owner) gets the
    # job the first call made instead of a second (tcl sends a fresh one per `tcl submit`).
    request_id: str = ""
    stdout_file: str = ""                 # sbatch -o: a pattern (tcluster/domain/outputfiles.py)
    stderr_file: str = ""                 # sbatch -e; "" with stdout_file: stderr goes there too
    open_mode: str = ""                   # append | truncate; "" = truncate
    script: str = ""                      # a job script's text (tcluster/domain/scripts.py)
    # The directory `tcl submit` ran in: where a task starts when no workdir is given (a
    # node that cannot reach it fails the task naming it). "" = an older client: /tmp.
    submit_dir: str = ""

    def validate(self) -> None:
        """Raises InvalidArgument naming the first bad field."""
        check_spec_bounds(self)         # sizes first: no later message quotes megabytes
        if not self.command or not self.command[0].strip():
            raise InvalidArgument("command", "is empty; give the program to run, e.g. `tcl submit -- python3 job.py`")
        if any("\x00" in part for part in self.command):
            raise InvalidArgument("command", "contains a NUL byte")
        if self.name and not _NAME.match(self.name):
            raise InvalidArgument("name", f"{quote(self.name)} is not allowed; use 1-63 of A-Z a-z 0-9 _ . - starting with a letter or digit")
        if self.request_id and not _REQUEST_ID.match(self.request_id):
            raise InvalidArgument("request_id", f"{quote(self.request_id)} is not allowed; use 1-64 of A-Z a-z 0-9 _ . : - "
                                                "starting with a letter or digit (e.g. a UUID)")
        if not _QUEUE.match(self.queue):
            raise InvalidArgument("queue", f"{quote(self.queue)} is not a queue path like 'default' or 'ads.prod'")
        if not self.array and not 1 <= self.tasks <= MAX_TASKS_PER_JOB:   # an array's count is its indexes
            raise InvalidArgument("tasks", f"{self.tasks} is out of range; allowed 1..{MAX_TASKS_PER_JOB}")
        for key, _ in self.env:
            if not _ENV_KEY.match(key):
                raise InvalidArgument("env", f"variable name {quote(key)} is not allowed; use [A-Za-z_][A-Za-z0-9_]*")
        for name, path in (("workdir", self.workdir), ("submit_dir", self.submit_dir)):
            if path and not path.startswith("/"):
                raise InvalidArgument(name, f"{quote(path)} must be an absolute path")
        self.resources.validate_request("resources")
        parse_constraints(self.constraints)
        check_outputs(self)
        if not (0.0 < self.weight < float("inf")):
            raise InvalidArgument("weight", f"{self.weight!r} must be a number > 0 (default 1)")
        self._validate_limits()

    def _validate_batch(self) -> None:
        if not (0.0 <= self.time_limit_s < float("inf")):
            raise InvalidArgument("time_limit", f"{self.time_limit_s!r} must be a duration >= 0 (0: none)")
        if not (0.0 <= self.gang_timeout_s < float("inf")):
            raise InvalidArgument("gang_timeout", f"{self.gang_timeout_s!r} must be a duration >= 0 (0: 300 s)")
        if self.array:
            indexes, _ = parse_array(self.array)
            if len(indexes) > MAX_ARRAY_TASKS:
                raise InvalidArgument("array", f"{len(indexes)} indexes; at most {MAX_ARRAY_TASKS} per array")
            if self.gang:
                raise InvalidArgument("gang", "an array's tasks cannot be a gang; submit a job of --tasks N with --gang")
        if self.dependency:
            parse_dependency(self.dependency)

    def _validate_limits(self) -> None:
        if not (0.0 <= self.cpu_limit < float("inf")):
            raise InvalidArgument("cpu_limit", f"{self.cpu_limit!r} must be a number of cores >= 0 (0: no cap)")
        if self.swap < -1:
            raise InvalidArgument("swap", f"{self.swap} must be bytes >= 0, or -1 for unlimited")
        if self.pids_max < 0:
            raise InvalidArgument("pids_max", f"{self.pids_max} must be >= 0 (0: the agent's default)")
        if not 0 <= self.retries <= MAX_RETRIES:
            raise InvalidArgument("retries", f"{self.retries} is out of range; allowed 0..{MAX_RETRIES}")
        if self.log_max_bytes < 0:
            raise InvalidArgument("log_max_bytes", f"{self.log_max_bytes} must be bytes >= 0 (0: the agent's default)")
        if self.network not in NETWORK_MODES:
            raise InvalidArgument("network", f"{quote(self.network)} is not one of: host, none, bridge")
        self._validate_batch()
        if self.on_preempt not in ON_PREEMPT:
            raise InvalidArgument("on_preempt", f"{quote(self.on_preempt)} is not one of: requeue, cancel")
        if not (0.0 <= self.net_limit < float("inf")):
            raise InvalidArgument("net_limit", f"{self.net_limit!r} must be bits/s >= 0 (0: the request)")


def check_outputs(spec: JobSpec) -> None:
    """Output file patterns, the open mode and the script (issue 34)."""
    check_pattern("stdout_file", spec.stdout_file)
    check_pattern("stderr_file", spec.stderr_file)
    if spec.open_mode not in OPEN_MODES:
        raise InvalidArgument("open_mode", f"{quote(spec.open_mode)} is not one of: truncate, append")
    if spec.script:
        check_script(spec.script)
    if spec.image and (spec.stdout_file or spec.stderr_file):
        # The container sees none of the node's directories: a file it wrote would go with it.
        raise InvalidArgument("image", "--stdout-file/--stderr-file cannot be used with --image: an image task "
                                       "sees only its image's filesystem, where the file would be removed with the "
                                       "container; read its output with `tcl logs` (it is kept as a native task's)")


DOCKER_LABEL = "tcluster.io/docker"      # set by agents with a usable docker engine
NETNS_LABEL = "tcluster.io/netns"        # set by agents that give tasks their own network
# set by agents started with --no-unlimited-memory: a job asking `--mem unlimited` is not placed there
MEMORY_LIMIT_LABEL = "tcluster.io/memory-limit-required"


def node_requirements(spec: JobSpec) -> tuple[str, ...]:
    """The job's constraints plus what its features need of a node: an image needs docker,
    an own network (or bandwidth) needs network namespaces, no memory limit a node that allows it. Shown in pending reasons."""
    implicit = []
    if spec.image:
        implicit.append(f"has {DOCKER_LABEL}")
    if task_network(spec) != "host":
        implicit.append(f"has {NETNS_LABEL}")
    if spec.resources.memory <= 0:
        implicit.append(f"!has {MEMORY_LIMIT_LABEL}")
    return tuple(spec.constraints) + tuple(implicit)


def task_network(spec: JobSpec) -> str:
    """host unless asked; a bandwidth request needs an own link to shape: bridge."""
    if spec.network:
        return spec.network
    return "bridge" if spec.resources.get("net") > 0 else "host"


@dataclass(frozen=True)
class Task:
    job_id: str
    index: int
    state: TaskState = TaskState.PENDING
    node: str = ""
    attempt: int = 0
    exit_code: int | None = None
    signal: int = 0
    reason: str = ""
    started_at: float = 0.0
    finished_at: float = 0.0
    usage: TaskUsage = NO_USAGE    # frozen: one shared instance (a TaskUsage() per task cost more than the task)
    failures: int = 0          # attempts that ended FAILED or LOST (retries count these)
    preemptions: int = 0       # attempts stopped to restore another queue's share (no retry used)
    gpus: tuple[int, ...] = ()  # the node's GPU indices bound to the attempt, as its agent reported them

    @property
    def id(self) -> str:
        return task_id(self.job_id, self.index)


def gpus_to_text(gpus: tuple[int, ...]) -> str:
    """'0,2' (the form of CUDA_VISIBLE_DEVICES); '' for none."""
    return ",".join(map(str, gpus))


def gpus_from_text(text: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in (text or "").split(",") if p.strip().isdigit())


def task_id(job_id: str, index: int) -> str:
    return f"{job_id}.{index}"


@dataclass(frozen=True)
class Job:
    id: str
    spec: JobSpec
    submitted_at: float
    state: JobState = JobState.PENDING
    finished_at: float = 0.0
    pending_reason: str = ""
    cancelled: bool = False
    # Arrays: indexes not yet given a task (placed ones have rows), those cancelled before
    # they ever started, and the live throttle (%N; `tcl update --throttle`), 0: none.
    unplaced: IndexSet = IndexSet()
    skipped: IndexSet = IndexSet()
    throttle: int = 0
    released: bool = False       # its dependency is met (a job without one never waits for it)
    reason: str = ""             # why the master ended it (an unmet dependency, a gang's failure)
    held_by: str = ""            # `tcl hold`: who holds its pending work back ("" = not held)

    @property
    def held(self) -> bool:
        """Waiting for its dependency: not offered to the scheduler."""
        return bool(self.spec.dependency) and not self.released and not self.cancelled

    @property
    def kept_back(self) -> bool:
        """Its pending tasks are not offered to the scheduler: a dependency, or `tcl hold`."""
        return self.held or bool(self.held_by)


@dataclass(frozen=True)
class Node:
    name: str
    capacity: Resources            # what tasks may use: declared minus reserved
    reserved: Resources = Resources()
    labels: tuple[tuple[str, str], ...] = ()
    state: NodeState = NodeState.READY
    last_seen: float = 0.0
    runtime: str = ""
    ceilings: Ceilings = Ceilings()   # from its last registration to this master; not stored
    ops: NodeOps = READY_OPS          # what an operator asked (cordon, drain, maintenance); kept across restarts
