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
from tcluster.domain.errors import ResourceExhausted
from tcluster.master.execrelay import ExecCap, ExecOpened


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
    async def found_then_running() -> Task:
        return await execs._running(service, execs._task(service, SimpleNamespace(name="alice"), OPENED))
    return asyncio.run(found_then_running())


OPENED = ExecOpened("j1", 0, ("true",))


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


def test_a_wait_for_a_starting_task_counts_against_the_exec_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    """--execs-per-user holds from the check on: a user cannot stack up waits for STARTING
    tasks beyond the execs they may have open."""
    monkeypatch.setattr(execs, "STARTING_WAIT_S", 5.0)
    cap = ExecCap(per_task=4, per_user=1)
    alice = SimpleNamespace(name="alice")

    async def second_while_first_waits() -> BaseException | None:
        async def no_input():  # type: ignore[no-untyped-def]
            return
            yield
        async def first() -> None:
            async for _ in execs.exec_in_task(FakeService([TaskState.STARTING]), cap, alice, OPENED, no_input()):
                pass
        waiting = asyncio.ensure_future(first())
        await asyncio.sleep(0.05)                    # the first waits for its task to start
        second: BaseException | None = None
        try:
            async for _ in execs.exec_in_task(FakeService([TaskState.STARTING]), cap, alice, OPENED, no_input()):
                pass
        except ResourceExhausted as e:
            second = e
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        return second
    refused = asyncio.run(second_while_first_waits())
    assert refused is not None and "--execs-per-user" in str(refused)
    assert cap._users == {} and cap._tasks == {}     # the cancelled wait let go of its hold
