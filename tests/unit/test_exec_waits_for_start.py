"""`tcl exec` right after `tcl submit`: the master waits for a STARTING task to run
(master/execs.py) instead of refusing it, audits the exec once, and still refuses a task
that never gets past STARTING or ends meanwhile."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pytest

from tcluster.domain.errors import FailedPrecondition
from tcluster.domain.model import Task, TaskState
from tcluster.master import execs
from tcluster.master.execrelay import ExecOpened


@dataclass
class FakeService:
    """The task's states as successive reads see them; the last one stays."""
    states: list[TaskState]
    checks: list[object] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.gate = SimpleNamespace(check=lambda caller, action: self.checks.append(action))
        self.state = SimpleNamespace(task=lambda task_id: self._next(task_id.rpartition(".")[0]))
        self.reads = 0

    def _next(self, job_id: str) -> Task:
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return replace(Task(job_id, 0), state=state, node="n1")

    def read(self, job_id: str, caller: Any) -> tuple[Any, list[Task]]:
        self.reads += 1
        job = SimpleNamespace(id=job_id, unplaced=(), spec=SimpleNamespace(owner="alice", tasks=1, array=""))
        return job, [self._next(job_id)]


def _running(service: FakeService) -> Task:
    return asyncio.run(execs._running_task(service, SimpleNamespace(name="alice"), ExecOpened("j1", 0, ("true",))))


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(execs, "STARTING_POLL_S", 0.001)


def test_a_starting_task_is_waited_for_and_the_exec_is_audited_once() -> None:
    service = FakeService([TaskState.STARTING] * 5 + [TaskState.RUNNING])
    assert _running(service).state is TaskState.RUNNING
    assert len(service.checks) == 1 and service.reads == 1     # the job read once, then its one task


@pytest.mark.parametrize("ends", [TaskState.FAILED, TaskState.KILLED])
def test_a_task_that_ends_while_starting_is_refused_with_its_state(ends: TaskState) -> None:
    with pytest.raises(FailedPrecondition, match=f"task j1.0 is {ends.value}: exec runs a command inside a RUNNING"):
        _running(FakeService([TaskState.STARTING, TaskState.STARTING, ends]))


def test_a_task_stuck_starting_is_refused_after_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(execs, "STARTING_WAIT_S", 0.05)
    with pytest.raises(FailedPrecondition, match="is STARTING"):
        _running(FakeService([TaskState.STARTING]))


@pytest.mark.parametrize("state", [TaskState.SUCCEEDED, TaskState.LOST])
def test_an_ended_task_is_refused_at_once(state: TaskState) -> None:
    service = FakeService([state])
    with pytest.raises(FailedPrecondition, match=f"is {state.value}"):
        _running(service)
    assert len(service.checks) == 1
