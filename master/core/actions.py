"""What the master's state machine asks the I/O layer to do, and what agents report."""

from __future__ import annotations

from dataclasses import dataclass, field

from tcluster.domain.ceilings import Ceilings
from tcluster.domain.gpuusage import GpuSample
from tcluster.domain.launch import Launch
from tcluster.domain.reports import TaskReport
from tcluster.domain.resources import Resources
from tcluster.master.core.usageblock import UsageBlock


@dataclass(frozen=True)
class Kill:
    node: str
    task_id: str
    attempt: int
    reason: str
    grace_s: float = 0.0       # SIGTERM, then SIGKILL after this; 0: the agent's --kill-grace-s


@dataclass(frozen=True)
class Registration:
    node: str
    capacity: Resources        # declared total
    reserved: Resources
    labels: tuple[tuple[str, str], ...]
    runtime: str
    running: tuple[tuple[str, int], ...]    # (task_id, attempt) the agent runs now
    reports: tuple[TaskReport, ...] = ()    # events it has not had acknowledged
    last_seq: int = 0                       # seq of the last of those reports
    ceilings: Ceilings = Ceilings()         # its --pids-max / --log-max; 0: not stated
    features: frozenset[str] = frozenset()  # tcluster/wire/features.py; none from an older agent
    usage_interval_s: float = 0.0           # the operator's --usage-interval-s; 0: the master's choice


@dataclass(frozen=True)
class LaunchBatch:
    """Several launches for one node (an agent with the launch-batch feature) in one message."""
    node: str
    launches: tuple[Launch, ...]


@dataclass(frozen=True)
class AckReports:
    seq: int
    usage_interval_s: float = 0.0


@dataclass(frozen=True)
class FetchLog:
    request_id: str
    task_id: str
    stderr: bool
    tail_bytes: int
    max_bytes: int
    follow: bool = False
    attempt: int = 0
    window: int = 0                 # LogData the agent may send ahead of credit; 0: unlimited


@dataclass(frozen=True)
class LogCredit:
    """The client took `chunks` more pieces of a log request; `cancel`: it left."""
    request_id: str
    chunks: int = 0
    cancel: bool = False


@dataclass(frozen=True)
class WatchUsage:
    """Fresh samples asked for (master/usagewatch.py): report usage every interval_s for for_s."""
    interval_s: float
    for_s: float


@dataclass(frozen=True)
class BinTarget:
    """LoTES: the bin a node emulates (class -> count), and its tasks' classes now."""
    config: str                              # "": no target
    counts: dict[int, int]
    classes: dict[str, int] = field(default_factory=dict)
    fallback: str = ""


@dataclass(frozen=True)
class Heartbeat:
    free: Resources
    usage: UsageBlock                          # the samples, by task id and attempt
    class_mix: dict[int, int] = field(default_factory=dict)   # LoTES: running tasks per class
    gpus: tuple[GpuSample, ...] = ()           # NVML's per-GPU samples of running tasks, where read


@dataclass(frozen=True)
class ReportBatch:
    reports: tuple[TaskReport, ...]
    last_seq: int


@dataclass(frozen=True)
class LogPiece:
    request_id: str
    data: bytes
    eof: bool
    error: str = ""
