"""Pure state machines: which task transitions are legal, and a job's state from its tasks."""

from __future__ import annotations

from typing import Iterable, Mapping

from tcluster.domain.model import JobState, TaskState

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


def job_state_from_counts(counts: Mapping[TaskState, int], cancelled: bool) -> JobState:
    """`job_state` over per-state task counts, so a big job's state costs O(1)."""
    if cancelled:
        return JobState.CANCELLED
    if counts.get(TaskState.STARTING, 0) or counts.get(TaskState.RUNNING, 0):
        return JobState.RUNNING
    if counts.get(TaskState.PENDING, 0):
        started = any(counts.get(s, 0) for s in TaskState if s.terminal)
        return JobState.RUNNING if started else JobState.PENDING
    total = sum(counts.values())
    if total and counts.get(TaskState.SUCCEEDED, 0) == total:
        return JobState.SUCCEEDED
    return JobState.FAILED
