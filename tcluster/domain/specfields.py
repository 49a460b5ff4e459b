"""The one field table of a job spec. For each JobSpec field: its kind (which decides how
the store codec, the protobuf mapping and the JSON view carry it, and how a job file or a
flag writes it), its proto field, its JSON key, its job-file key and its `tcl submit` flag.

codec.py, wire.py, views.py, cli/jobfile.py, cli/spec.py and tcluster/views/redaction.py read
this table and nothing else; tests/unit/test_specfields.py fails when it, the JobSpec dataclass and the proto
disagree. Adding a job field: the JobSpec attribute, its entry here, the proto, the docs.

The table's order is the job JSON's key order (`tcl status -o json`, the dashboard); the
`tcl submit --help` options and the job file's key list keep the order they always had
(cli/submitflags.py, cli/jobfile.py), with a new field's after them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable


class Kind(Enum):
    """What a value is, for every form it takes."""
    TEXT = "text"            # a string
    COUNT = "count"          # a whole number (range checked by JobSpec.validate)
    NATURAL = "natural"      # a whole number >= 0, refused early by the file and the flag
    WEIGHT = "weight"        # a number > 0
    CORES = "cores"          # a number of cores: 0.5, 2 or 500m
    SIZE = "size"            # bytes, written as a size: 64Mi, 0.5GB
    SWAP = "swap"            # a size, or `unlimited` (-1)
    RATE = "rate"            # bits/s, written as a rate: 50Mbit
    PAIRS = "pairs"          # sorted (key, value) pairs: a map in protobuf and JSON, K=V on flags
    LIST = "list"            # strings; a flag adds to the file's
    ARGV = "argv"            # the command: a list, or one shell line in a job file
    RESOURCES = "resources"  # per-kind amounts (flags: --cpu, --mem, --resources, --net)
    DURATION = "duration"    # seconds, written as a duration: 90 (seconds), 15m, 2h, 1-00:00:00
    TIME_LIMIT = "time_limit"  # seconds, written as Slurm's time limit: 90 (minutes), 1:30:00, 1h30m
    FLAG = "flag"            # true or false (a flag without a value)

    @property
    def is_sequence(self) -> bool:
        return self in (Kind.LIST, Kind.ARGV)

    @property
    def is_scalar(self) -> bool:
        return not self.is_sequence and self not in (Kind.PAIRS, Kind.RESOURCES)


class Shown(Enum):
    """Who may read a field's value when a job is shown (Get, List, the dashboard, `tcl -o
    json`); everyone else gets its keys with the values redacted, by the master."""
    ALL = "all"              # everyone who may read the job
    OWNER = "owner"          # the job's owner and admins: secrets travel in it
    QUEUE = "queue"          # as ALL, or as OWNER where the job's queue sets `hide_command`


@dataclass(frozen=True)
class Carrier:
    """How one form of a spec (the store's dict, protobuf, JSON) holds each shape of value;
    scalars go as they are."""
    resources: Callable[[Any], Any]
    pairs: Callable[[Any], Any]
    sequence: Callable[[Any], Any]

    def carry(self, kind: Kind, value: Any) -> Any:
        if kind is Kind.RESOURCES:
            return self.resources(value)
        if kind is Kind.PAIRS:
            return self.pairs(value)
        return self.sequence(value) if kind.is_sequence else value


@dataclass(frozen=True)
class SpecField:
    name: str                        # the JobSpec attribute
    kind: Kind
    proto: str                       # the jobs.proto JobSpec field
    json: str | None                 # the key in job JSON; None: not shown as such
    file_key: str | None = None      # the key in a job file; None: not read from files
    flag: str | None = None          # the `tcl submit` option; None: no option of its own
    metavar: str | None = None
    help: str = ""
    choices: tuple[str, ...] = ()
    # Written to the store only when set: an older master (a rolling upgrade of HA masters,
    # or a rollback) refuses unknown fields, and most specs never use a new one. Set it on
    # every field added from now on.
    stored_when_set: bool = False
    shown: Shown = Shown.ALL

    @property
    def dest(self) -> str:
        """The argparse attribute of the flag."""
        assert self.flag is not None
        return self.flag.lstrip("-").replace("-", "_")


def _field(name: str, kind: Kind, *, json: bool = True, file: bool | str = False, flag: str | None = None,
           metavar: str | None = None, help: str = "", choices: tuple[str, ...] = (),  # noqa: A002 - argparse's word
           stored_when_set: bool = False, shown: Shown = Shown.ALL) -> SpecField:
    """Most names are the same everywhere: the proto field and JSON key are the name, a
    job-file key (file=True) too unless given as a string."""
    file_key = name if file is True else (file or None)
    return SpecField(name, kind, proto=name, json=name if json else None, file_key=file_key, flag=flag,
                     metavar=metavar, help=help, choices=choices, stored_when_set=stored_when_set,
                     shown=shown)


SPEC_FIELDS: tuple[SpecField, ...] = (
    _field("name", Kind.TEXT, file=True, flag="--name", help="job name (1-63 of A-Z a-z 0-9 _ . -)"),
    _field("queue", Kind.TEXT, file=True, flag="--queue", help="leaf queue path, e.g. ads.prod (default: default)"),
    # Shown as tasks_total (with the task list under "tasks"), not under its own name.
    _field("tasks", Kind.COUNT, json=False, file=True, flag="--tasks", help="number of identical tasks (default: 1)"),
    _field("resources", Kind.RESOURCES, file=True),
    _field("command", Kind.ARGV, file=True, shown=Shown.QUEUE),
    # Credentials are passed in the environment: its values are the owner's (keys stay shown).
    _field("env", Kind.PAIRS, file=True, flag="--env", metavar="KEY=VALUE",
           help="environment variable (repeatable)", shown=Shown.OWNER),
    _field("user", Kind.TEXT, file=True, flag="--user",
           help="run tasks as this Unix user (admins only; default: your own mapping)"),
    _field("owner", Kind.TEXT),              # set by the master from the caller, never by a client
    _field("request_id", Kind.TEXT, flag="--request-id", metavar="ID", stored_when_set=True,
           help="idempotency key (1-64 of A-Z a-z 0-9 _ . : -): submitting again with the same one returns "
                "the job the first made instead of a second (default: a fresh one per call, reused by its "
                "own retries)"),
    _field("workdir", Kind.TEXT, file=True, flag="--workdir", metavar="DIR",
           help="absolute working directory of each task (default: the directory tcl submit runs in)"),
    # Sent by tcl (its current directory), not a flag: --workdir overrides it.
    _field("submit_dir", Kind.TEXT, stored_when_set=True),
    _field("labels", Kind.PAIRS, file=True, flag="--label", metavar="KEY=VALUE",
           help="free-form job label (repeatable)"),
    _field("constraints", Kind.LIST, file=True, flag="--constraint", metavar="EXPR",
           help="on node labels, repeatable, all must hold: rack=r1, disk!=hdd, 'arch in (x86_64,arm64)', 'has gpu'"),
    _field("weight", Kind.WEIGHT, file=True, flag="--weight", metavar="W",
           help="the job's weight among its queue's jobs (default: 1)"),
    _field("cpu_limit", Kind.CORES, flag="--cpu-limit", metavar="CORES",
           help="hard CPU cap per task, e.g. 0.5 (default: none, only the weight)"),
    _field("swap", Kind.SWAP, flag="--swap", metavar="SIZE",
           help="swap per task beyond --mem, e.g. 200Mi or unlimited (default: none)"),
    _field("pids_max", Kind.COUNT, flag="--pids-max", metavar="N",
           help="processes+threads per task, up to the agent's (default: the agent's, 4096)"),
    _field("retries", Kind.NATURAL, file=True, flag="--retries", metavar="N",
           help="run a FAILED or LOST task again, up to N times (default: 0)"),
    _field("image", Kind.TEXT, file=True, flag="--image", metavar="IMAGE",
           help="run each task in this docker image (on nodes with docker)"),
    _field("network", Kind.TEXT, file=True, flag="--network", choices=("host", "none", "bridge"),
           help="host (default), none (loopback only) or bridge (own address on the node's bridge)"),
    _field("net_limit", Kind.RATE, file=True, flag="--net-limit", metavar="RATE",
           help="let a task burst up to RATE when the link is idle"),
    _field("log_max_bytes", Kind.SIZE, file="log_max", flag="--log-max", metavar="SIZE",
           help="per log file before it rotates, up to the agent's (default: the agent's, 64Mi)"),
    _field("time_limit_s", Kind.TIME_LIMIT, file="time_limit", flag="--time-limit", metavar="TIME",
           stored_when_set=True,
           help="a task still running this long gets SIGTERM, then SIGKILL, and ends FAILED (TimeLimit): "
                "a bare number is minutes as in Slurm (90), or 45:00, 1:30:00, 2-00:00:00, 90s, 1h30m "
                "(default: none, or the queue's max_time_limit)"),
    _field("array", Kind.TEXT, file=True, flag="--array", metavar="SPEC", stored_when_set=True,
           help="an array job: task indexes in Slurm's form, 0-999, 1,3,5-7, 0-99:2, and %%N to run at most N "
                "at once (0-999%%50); each task gets TCL_ARRAY_TASK_ID"),
    _field("dependency", Kind.TEXT, file=True, flag="--dependency", metavar="SPEC", stored_when_set=True,
           help="start only after other jobs, Slurm's form: afterok:J1:J2,afterany:J3 (`?` instead of `,`: "
                "any one); see also --after-ok, --after-any, --after-notok"),
    _field("keep_unmet", Kind.FLAG, file="keep_on_unmet_dependency", flag="--keep-on-unmet-dependency",
           stored_when_set=True,
           help="keep the job waiting when a dependency can no longer be met (default: cancel it, naming the job)"),
    _field("gang", Kind.FLAG, file=True, flag="--gang", stored_when_set=True,
           help="all of the job's tasks start together (in one round) or none does"),
    _field("gang_timeout_s", Kind.DURATION, file="gang_timeout", flag="--gang-timeout-s", metavar="DURATION",
           stored_when_set=True,
           help="a gang not all RUNNING this long after it started is stopped and requeued (default: 300)"),
    _field("gang_restart", Kind.FLAG, file=True, flag="--gang-restart", stored_when_set=True,
           help="a failed member restarts the whole gang (default: it ends the gang's job FAILED)"),
    _field("on_preempt", Kind.TEXT, file=True, flag="--on-preempt", choices=("requeue", "cancel"),
           stored_when_set=True,
           help="when a task is preempted to restore another queue's share: requeue it (default; no retry "
                "is used) or cancel the job"),
    _field("stdout_file", Kind.TEXT, file=True, flag="--stdout-file", metavar="PATTERN", stored_when_set=True,
           help="write each task's stdout to this file (sbatch -o), relative to its working directory, as its "
                "user: %%j job id, %%t task index, %%a array index, %%A array job id, %%u user, %%x job name, %%N node, "
                "%%%% a percent (e.g. out-%%j-%%t.txt); stderr goes there too unless --stderr-file"),
    _field("stderr_file", Kind.TEXT, file=True, flag="--stderr-file", metavar="PATTERN", stored_when_set=True,
           help="write each task's stderr to this file (sbatch -e), same patterns"),
    _field("open_mode", Kind.TEXT, file=True, flag="--open-mode", choices=("truncate", "append"),
           stored_when_set=True,
           help="truncate (default: a task's first attempt starts its files anew) or append to them"),
    # The text of `tcl submit run.sh`: the owner's (scripts carry paths and secrets as --env does).
    _field("script", Kind.TEXT, stored_when_set=True, shown=Shown.OWNER),
)

BY_NAME: dict[str, SpecField] = {f.name: f for f in SPEC_FIELDS}
FILE_KEYS: tuple[str, ...] = tuple(f.file_key for f in SPEC_FIELDS if f.file_key)
