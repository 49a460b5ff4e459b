"""Pure state machines: which task transitions are legal, and a job's state from its tasks."""

from __future__ import annotations

from typing import Iterable

from tcluster.model import JobState, TaskState

_ALLOWED: dict[TaskState, frozenset[TaskState]] = {
    TaskState.PENDING: frozenset({TaskState.STARTING, TaskState.KILLED}),
    # A short task may finish before its RUNNING event arrives; a launch the agent
    # refuses goes back to PENDING.
    TaskState.STARTING: frozenset({
        TaskState.PENDING, TaskState.RUNNING, TaskState.SUCCEEDED, TaskState.FAILED,
        TaskState.KILLED, TaskState.LOST,
    }),
    TaskState.RUNNING: frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.KILLED, TaskState.LOST}),
    TaskState.SUCCEEDED: frozenset(),
    TaskState.FAILED: frozenset(),
    TaskState.KILLED: frozenset(),
    TaskState.LOST: frozenset(),
}


def can_transition(current: TaskState, target: TaskState) -> bool:
    return target in _ALLOWED[current]


def job_state(task_states: Iterable[TaskState], cancelled: bool) -> JobState:
    """RUNNING while any task runs (or some ran and others still wait); once all are
    done, SUCCEEDED if every task succeeded, else FAILED. Cancel wins."""
    states = list(task_states)
    if cancelled:
        return JobState.CANCELLED
    if any(s in (TaskState.STARTING, TaskState.RUNNING) for s in states):
        return JobState.RUNNING
    if any(s is TaskState.PENDING for s in states):
        started = any(s.terminal for s in states)
        return JobState.RUNNING if started else JobState.PENDING
    if states and all(s is TaskState.SUCCEEDED for s in states):
        return JobState.SUCCEEDED
    return JobState.FAILED
