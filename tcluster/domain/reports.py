"""A task state change as an agent reports it: shared by agent and master."""

from __future__ import annotations

from dataclasses import dataclass

from tcluster.domain.model import TaskState, TaskUsage


@dataclass(frozen=True)
class TaskReport:
    """A task state change as an agent reports it."""
    task_id: str
    attempt: int
    state: TaskState
    exit_code: int | None = None
    signal: int = 0
    reason: str = ""
    at: float = 0.0
    usage: TaskUsage | None = None
    rejected: bool = False
    gpus: tuple[int, ...] = ()     # RUNNING: the node's GPU indices bound to the attempt
