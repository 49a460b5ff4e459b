"""The states of tasks, jobs and nodes: plain enums, apart from the job model so that a
client printing a reply (`tcl status`, `tcl jobs`) need not load it."""

from __future__ import annotations

from enum import Enum


class TaskState(str, Enum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    LOST = "LOST"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_TASK_STATES

    @property
    def holds_resources(self) -> bool:
        return self in (TaskState.STARTING, TaskState.RUNNING)


TERMINAL_TASK_STATES = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.LOST})


class JobState(str, Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class NodeState(str, Enum):
    """READY and DOWN follow the agent's stream; the others are an operator's (README,
    "Node operations"): CORDONED takes no new tasks, DRAINING waits for its tasks to end
    (or its deadline), DRAINED has none left, MAINT is inside a maintenance window."""
    READY = "READY"
    DOWN = "DOWN"
    CORDONED = "CORDONED"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"
    MAINT = "MAINT"
