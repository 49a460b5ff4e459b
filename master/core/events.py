"""What happens to the master (events), what it decides to do about it (actions), and
the durable rows a decision changes (writes). The state core turns an event into a
`Step`; the I/O layer writes the step's rows first, then applies it and sends its
actions. Nothing here does I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from tcluster.master.core.execio import FeedExec, StartExec
from tcluster.master.core.actions import (
    AckReports, BinTarget, FetchLog, Kill, LaunchBatch, LogCredit, Registration, WatchUsage,
)
from tcluster.domain.launch import Launch
from tcluster.domain.reports import TaskReport
from tcluster.domain.arrays import IndexSet
from tcluster.domain.ledger import LedgerRow
from tcluster.domain.model import Job, JobSpec, JobState, Node, Task
from tcluster.domain.resources import Resources
from tcluster.master.core.usageblock import UsageBlock
from tcluster.scheduler.decay import DecayLedger


@dataclass(frozen=True)
class Now:
    wall: float      # unix seconds: what users see (submitted_at, finished_at)
    mono: float      # monotonic seconds: every timeout (an NTP step must not detach agents)


# ---- events ----

@dataclass(frozen=True)
class Submit:
    job_id: str
    spec: JobSpec          # validated by the service before the event is made
    # The states of the jobs its dependency names that are no longer in memory (read from
    # the store by the service); those in memory are read from the state.
    known: tuple[tuple[str, JobState], ...] = ()


@dataclass(frozen=True)
class SubmitPinned:
    """A federated task its LM checked (master/core/pinning.py): a one-task job placed on
    `node` at once when the node has room now, else waiting for that node only."""
    job_id: str
    spec: JobSpec
    node: str


@dataclass(frozen=True)
class CancelTasks:
    """`tcl cancel JOB --tasks 5-9`: some of a job's tasks (an array's indexes)."""
    job_id: str
    indexes: IndexSet


@dataclass(frozen=True)
class UpdateJob:
    """`tcl update JOB --throttle N`: what may change while a job runs; `spec`: a pending
    job's new spec (cpu, memory, time limit, queue, weight), checked at the edge as a submit's."""
    job_id: str
    throttle: int | None = None
    spec: JobSpec | None = None


@dataclass(frozen=True)
class HoldJob:
    """`tcl hold JOB` (by: who holds it) / `tcl release JOB` (hold False): its pending work only."""
    job_id: str
    by: str
    hold: bool = True


@dataclass(frozen=True)
class RequeueTasks:
    """`tcl requeue JOB [--tasks 5-9]`: running attempts stopped, ended tasks waiting again."""
    job_id: str
    indexes: IndexSet | None
    by: str


@dataclass(frozen=True)
class Cancel:
    job_id: str


@dataclass(frozen=True)
class Place:
    placements: tuple[tuple[str, str], ...]     # (task id, node)
    notes: tuple[tuple[str, str], ...] = ()     # (job id, the reason its tasks start with): backfill's


@dataclass(frozen=True)
class AgentJoined:
    registration: Registration


@dataclass(frozen=True)
class AgentLeft:
    node: str


@dataclass(frozen=True)
class Reports:
    node: str
    reports: tuple[TaskReport, ...]
    last_seq: int


@dataclass(frozen=True)
class Beat:
    node: str
    free: Resources
    usage: UsageBlock


@dataclass(frozen=True)
class Preempt:
    """Stop these attempts to make room for other queues' tasks (scheduler/preemption.py):
    (task id, attempt, reason, the preempting job). Their ends requeue them."""
    victims: tuple[tuple[str, int, str, str], ...]


@dataclass(frozen=True)
class Cordon:
    """An admin's: no new tasks on these nodes (all or none: an unknown name refuses the event)."""
    nodes: tuple[str, ...]
    by: str
    reason: str = ""


@dataclass(frozen=True)
class Uncordon:
    """Back to READY: lifts a cordon, cancels a drain, ends the maintenance window."""
    nodes: tuple[str, ...]
    by: str
    reason: str = ""


@dataclass(frozen=True)
class Drain:
    """Cordon, let the tasks end; at now + deadline_s (0: no deadline) requeue what still runs."""
    nodes: tuple[str, ...]
    by: str
    reason: str = ""
    deadline_s: float = 0.0


@dataclass(frozen=True)
class Maintain:
    """A maintenance window [start, start + duration_s) (unix seconds): placement starts nothing
    there that could still run when it opens; inside it the node is MAINT."""
    nodes: tuple[str, ...]
    by: str
    start: float
    duration_s: float
    reason: str = ""


@dataclass(frozen=True)
class Forget:
    """An admin's word that these unreachable nodes' machines are dead (`tcl node forget`):
    what ran there ended, so a stop the node never confirmed is taken as done now."""
    nodes: tuple[str, ...]
    by: str
    reason: str = ""


NodeEvent = Cordon | Uncordon | Drain | Maintain | Forget


@dataclass(frozen=True)
class Tick:
    """Timeouts: silent nodes, lost tasks, launches that never started, old jobs."""


@dataclass(frozen=True)
class AccrueUsage:
    """--usage-half-life: the decayed usage as of now (scheduler/decay.py), made durable so
    that a restart or a new leader orders siblings as this master did."""
    ledger: DecayLedger


Event = (Submit | SubmitPinned | Cancel | Place | AgentJoined | AgentLeft | Reports | Beat | Tick | AccrueUsage | Preempt
         | CancelTasks | UpdateJob | HoldJob | RequeueTasks
         | NodeEvent)


# ---- actions ----

@dataclass(frozen=True)
class Welcome:
    node: str
    heartbeat_interval_s: float
    kills: tuple[Kill, ...]
    fence_after_s: float
    bin_target: object = None          # LoTES: an actions.BinTarget, added by the I/O layer
    usage_interval_s: float = 0.0      # stream-liveness agents: usage at most this often (0: heartbeats)
    cluster_nodes: int = 0


@dataclass(frozen=True)
class Ack:
    node: str
    seq: int
    usage_interval_s: float = 0.0      # a stream-liveness node's new usage interval (0: unchanged)


@dataclass(frozen=True)
class Disconnect:
    """Close a node's stream: it has been silent past the node timeout."""
    node: str
    reason: str


Action = Launch | Kill | Welcome | Ack | Disconnect
Outbound = (Launch | LaunchBatch | Kill | AckReports | FetchLog | LogCredit | BinTarget | Welcome | WatchUsage
            | StartExec | FeedExec)    # what an agent's link carries out


# ---- what a step changes ----

class KillMode(IntEnum):
    """What the end of a stopped attempt means (stored as a number: the kills' `retry` column)."""
    END = 0         # cancelled: the task ends KILLED
    RETRY = 1       # given up (it never started): its end counts as LOST, and may use a retry
    REQUEUE = 2     # preempted: the task waits again; no retry is used
    TIMELIMIT = 3   # past its --time-limit: the task ends FAILED (TimeLimit), no retry
    GANG = 4        # its gang restarts: the task waits again with the others, no retry used
    ASKED = 5       # `tcl requeue`: the task waits again, whatever its end; no retry used


def kill_mode(stored: int) -> KillMode:
    """A stored mode; one this master does not know (a newer master's) is taken as END."""
    try:
        return KillMode(int(stored))
    except ValueError:
        return KillMode.END


@dataclass(frozen=True)
class KillIntent:
    """Persisted until the node reports the attempt's end (or shows it no longer runs)."""
    task_id: str
    attempt: int
    node: str
    reason: str
    mode: KillMode = KillMode.END
    by_job: str = ""           # REQUEUE: the job whose task the room is for

    @property
    def retry(self) -> bool:
        return self.mode is KillMode.RETRY


@dataclass(frozen=True)
class NodeLive:
    """Liveness, in memory only: rebuilt from master start (nodes loaded from disk count
    as last seen then)."""
    connected: bool
    last_seen: float           # monotonic: the last message from the node
    last_seen_wall: float = 0.0
    # A stream-liveness agent (tcluster/wire/features.py): its open stream is its liveness, and
    # only report silence past this many seconds takes it DOWN (0: an older agent, whose
    # heartbeats are its liveness: node_timeout_s).
    report_limit_s: float = 0.0
    usage_interval_s: float = 0.0      # what the node was told (Welcome, then Ack)
    interval_fixed: bool = False       # the operator's --usage-interval-s: never changed


@dataclass
class Step:
    # durable rows (written in one transaction before anything else happens)
    jobs: dict[str, Job] = field(default_factory=dict)
    tasks: dict[str, Task] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    kills_put: dict[tuple[str, int], KillIntent] = field(default_factory=dict)
    kills_del: set[tuple[str, int]] = field(default_factory=set)
    jobs_del: set[str] = field(default_factory=set)
    purge_before: float = 0.0      # forget every job that finished before this (unix seconds)
    ticked: float | None = None    # a Tick's monotonic time: apply files away the launches it found overdue
    ticked_wall: float | None = None   # ... and its wall time: the time limits it acted on
    decayed_usage: DecayLedger | None = None   # AccrueUsage: the ledger now (one record)
    ledger: list[LedgerRow] = field(default_factory=list)   # the attempts that ended (master/core/ledgerrows.py)
    specs: set[str] = field(default_factory=set)   # jobs whose spec changed (`tcl update`): written again
    # memory only
    live: dict[str, NodeLive] = field(default_factory=dict)
    usage: UsageBlock | None = None   # a beat's samples of tasks that hold resources there
    free: dict[str, Resources] = field(default_factory=dict)
    actions: list[Action] = field(default_factory=list)
    known_states: dict[str, JobState] = field(default_factory=dict)   # waited-on jobs not in memory
    # chain depths a submit's check computed: kept (state.chain_depths) only once the step is applied
    chain_depths: dict[str, int] = field(default_factory=dict)

    @property
    def durable(self) -> bool:
        return bool(self.jobs or self.tasks or self.nodes or self.kills_put or self.kills_del or self.jobs_del
                    or self.purge_before or self.decayed_usage is not None or self.ledger)


__all__ = [
    "AckReports", "Ack", "Action", "AgentJoined", "AgentLeft", "Beat", "AccrueUsage", "Cancel", "CancelTasks", "UpdateJob", "HoldJob", "RequeueTasks", "Cordon",
    "Disconnect", "Drain", "Event", "Forget", "Kill", "Maintain", "NodeEvent", "Uncordon",
    "KillIntent", "KillMode", "kill_mode", "Launch", "NodeLive", "Now", "Place", "Preempt", "Reports", "Step", "Submit", "SubmitPinned", "Tick",
    "Welcome",
]
