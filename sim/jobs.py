"""A scenario's jobs and what a run records of each: the types the simulator's modules
share (sim/scenario.py reads SimJob and its BatchSpec from a file, sim/batch.py parses
the batch keys and resolves dependencies over JobTracks, sim/engine.py runs them,
sim/preempting.py and sim/report.py read them). They import nothing of sim/, so that
no two of those modules import each other."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tcluster.domain.arrays import IndexSet
from tcluster.domain.dependency import Dependency
from tcluster.domain.model import Job, Task
from tcluster.domain.resources import Resources


@dataclass(frozen=True)
class BatchSpec:
    """A scenario job's batch keys, as sim/batch.py parses them."""
    array: str = ""                      # as written: Slurm's form
    indexes: IndexSet = IndexSet()       # the array's indexes (empty: not an array)
    throttle: int = 0                    # %N; 0: none
    dependency: str = ""                 # as written, naming scenario jobs
    parsed: Dependency | None = None
    keep_unmet: bool = False
    gang: bool = False
    time_limit_s: float = 0.0            # 0: none

    @property
    def used(self) -> bool:
        return self != BatchSpec()


@dataclass(frozen=True)
class SimJob:
    """One job of a scenario file (sim/scenario.py)."""
    name: str
    queue: str
    submit: float
    tasks: int
    resources: Resources
    duration: float | None          # None: runs until the end
    weight: float = 1.0
    constraints: tuple[str, ...] = ()
    batch: BatchSpec = BatchSpec()   # array, dependency, gang, time limit (none by default)
    user: str = ""                   # who submits it: the JobSpec's owner, for per-user quotas and
                                     # a leaf that shares by users ("": anonymous to quotas, itself to sharing)


@dataclass
class TaskRun:
    """One start of a task on a node, until it ended."""
    task: int
    node: str
    start: float
    end: float | None = None     # None: still running at the end of the run
    preempted: bool = False      # ended by a preemption (the task was requeued)
    reason: str = ""             # why it failed (TimeLimit)


@dataclass
class JobTrack:
    """A submitted job's progress through a run (sim/engine.py)."""
    spec: SimJob
    job: Job
    # Tasks neither running nor done: requeued ones first (they start again soonest), then by index.
    waiting: deque[int] = field(default_factory=deque)
    done: int = 0
    running: dict[int, Task] = field(default_factory=dict)   # leaving ones too: they hold their room
    leaving: set[int] = field(default_factory=set)           # preempted, in their grace
    attempts: dict[int, int] = field(default_factory=dict)   # task -> attempts started
    runs: list[TaskRun] = field(default_factory=list)
    unplaced: IndexSet = IndexSet()       # an array's indexes never started (Job.unplaced in the round)
    failed: int = 0                       # tasks ended FAILED (their time limit)
    peak: int = 0                         # most tasks running at once
    released_at: float | None = None      # when its dependency was met
    ended_at: float | None = None         # when its last task ended, or it was cancelled
    reason: str = ""                      # why it was cancelled, or what it waits for
    held_since: float | None = None       # when a reservation first held room for it
    backfilled_before: str = ""           # the job whose reserved room it started on (backfill)
    estimate: float | None = None         # the earliest start estimate backfill knew while it held room

    @property
    def left(self) -> int:
        """Tasks not yet started, or requeued."""
        return len(self.waiting) + len(self.unplaced)

    @property
    def pending(self) -> int:
        """What the round may place now: none while held or cancelled, at most the throttle."""
        if self.job.held or self.job.cancelled:
            return 0
        if self.job.throttle:
            return min(self.left, max(self.job.throttle - len(self.running), 0))
        return self.left
