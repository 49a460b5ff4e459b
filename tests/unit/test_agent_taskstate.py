"""The agent's task state machine, row by row: (attempts before, event) -> (actions,
phase after). Sans-IO: no runtime, no loop, no files."""

from __future__ import annotations

import signal

import pytest

from tcluster.domain.launch import Launch
from tcluster.agent.runtime.base import ExitStatus
from tcluster.agent.taskstate import (
    Adopted, AgentTasks, Attempt, CutOff, Exited, GraceOver, KillAsked, LaunchAsked, Launched, LaunchFailed, Phase,
    Report, Signal, StartContainer,
)
from tcluster.domain.model import JobSpec, TaskState
from tcluster.domain.resources import Resources

T = "0123abcd.0"


def req(attempt: int = 1, cpu: float = 1.0, retries: int = 0) -> Launch:
    return Launch(T, attempt, "0123abcd", 0, JobSpec(("sleep", "9"), Resources(cpu, 2**20), retries=retries))


def machine(*attempts: Attempt) -> AgentTasks:
    tasks = AgentTasks(Resources(4, 2**30), Resources())
    tasks.attempts = {a.request.key: a for a in attempts}
    return tasks


def kinds(actions: list[object]) -> list[str]:
    out = []
    for a in actions:
        if isinstance(a, Report):
            r = a.report
            out.append(f"report {r.state.value}{' rejected' if r.rejected else ''} #{r.attempt}")
        elif isinstance(a, Signal):
            out.append(f"signal {signal.Signals(a.signum).name}")
        else:
            out.append(type(a).__name__)
    return out


LAUNCHING, RUNNING, KILLING = Phase.LAUNCHING, Phase.RUNNING, Phase.KILLING
OK = ExitStatus(0, 0, 5.0)
BAD = ExitStatus(3, 0, 5.0)

ROWS = [
    # (name, attempts before, event, actions, phase of attempt 1 after (None: gone))
    ("launch", [], LaunchAsked(req(), 1.0), ["StartContainer"], LAUNCHING),
    ("same launch again is a no-op", [Attempt(req(), RUNNING)], LaunchAsked(req(), 1.0), [], RUNNING),
    ("another attempt while one is here is refused", [Attempt(req(1), RUNNING)], LaunchAsked(req(2), 1.0),
     ["report FAILED rejected #2"], RUNNING),
    ("no room: refused", [], LaunchAsked(req(cpu=9), 1.0), ["report FAILED rejected #1"], None),
    ("launched", [Attempt(req(), LAUNCHING)], Launched(f"{T}.1", 2.0), ["report RUNNING #1", "WatchExit"], RUNNING),
    ("kill before the launch finished is kept", [Attempt(req(), LAUNCHING)], KillAsked(T, 1, "cancelled", 1.0),
     [], LAUNCHING),
    ("...and carried out when it finishes", [Attempt(req(), LAUNCHING, "cancelled")], Launched(f"{T}.1", 2.0),
     ["report RUNNING #1", "WatchExit", "signal SIGTERM", "ArmGrace"], KILLING),
    ("launch failed", [Attempt(req(), LAUNCHING)], LaunchFailed(f"{T}.1", "exec failed", 2.0),
     ["report FAILED #1"], None),
    ("launch failed after a kill", [Attempt(req(), LAUNCHING, "cancelled")], LaunchFailed(f"{T}.1", "x", 2.0),
     ["report KILLED #1"], None),
    ("kill a running attempt", [Attempt(req(), RUNNING)], KillAsked(T, 1, "cancelled", 1.0),
     ["signal SIGTERM", "ArmGrace"], KILLING),
    ("kill again: nothing more", [Attempt(req(), KILLING, "cancelled")], KillAsked(T, 1, "cancelled", 1.0),
     [], KILLING),
    ("kill of another attempt: answered, this one untouched", [Attempt(req(1), RUNNING)],
     KillAsked(T, 2, "stale", 1.0), ["report KILLED #2"], RUNNING),
    ("kill of an attempt that is not here", [], KillAsked(T, 1, "cancelled", 1.0), ["report KILLED #1"], None),
    ("grace over: SIGKILL", [Attempt(req(), KILLING, "cancelled")], GraceOver(f"{T}.1"), ["signal SIGKILL"], KILLING),
    ("grace over after the exit: nothing", [], GraceOver(f"{T}.1"), [], None),
    ("exit 0", [Attempt(req(), RUNNING)], Exited(f"{T}.1", OK, None, 6.0),
     ["report SUCCEEDED #1", "RemoveContainer"], None),
    ("exit 3", [Attempt(req(), RUNNING)], Exited(f"{T}.1", BAD, None, 6.0), ["report FAILED #1", "RemoveContainer"], None),
    ("exit while killing", [Attempt(req(), KILLING, "cancelled")], Exited(f"{T}.1", OK, None, 6.0),
     ["report KILLED #1", "RemoveContainer"], None),
    ("exit of something unknown: just remove it", [], Exited(f"{T}.1", OK, None, 6.0), ["RemoveContainer"], None),
    ("adopted after a restart", [], Adopted(req()), ["WatchExit"], RUNNING),
    ("cut off: a task with retries is killed", [Attempt(req(retries=1), RUNNING)], CutOff(40, 1.0),
     ["signal SIGTERM", "ArmGrace"], KILLING),
    ("cut off: a task without retries keeps running", [Attempt(req(), RUNNING)], CutOff(40, 1.0), [], RUNNING),
]


@pytest.mark.parametrize("name,before,event,actions,after", ROWS, ids=[r[0] for r in ROWS])
def test_transition(name: str, before: list[Attempt], event: object, actions: list[str], after: Phase | None) -> None:
    tasks = machine(*before)
    assert kinds(tasks.handle(event)) == actions  # type: ignore[arg-type]
    attempt = tasks.attempts.get(f"{T}.1")
    assert (attempt.phase if attempt else None) == after


def test_kill_reason_and_exit_details_reach_the_report() -> None:
    tasks = machine(Attempt(req(), RUNNING))
    tasks.handle(KillAsked(T, 1, "cancelled", 1.0))
    report = tasks.handle(Exited(f"{T}.1", ExitStatus(None, 15, 7.0), None, 8.0))[0]
    assert isinstance(report, Report)
    assert (report.report.state, report.report.reason, report.report.signal, report.report.at) == (
        TaskState.KILLED, "cancelled", 15, 7.0)


def test_resources_are_held_from_launch_to_exit() -> None:
    tasks = machine()
    tasks.handle(LaunchAsked(req(cpu=3), 1.0))
    assert tasks.free().cpu == 1
    assert isinstance(tasks.handle(LaunchAsked(Launch("0123abcd.1", 1, "0123abcd", 1,
                                                             JobSpec(("x",), Resources(2))), 1.0))[0], Report)
    tasks.handle(Exited(f"{T}.1", OK, None, 2.0))
    assert tasks.free().cpu == 4
    assert isinstance(tasks.handle(LaunchAsked(req(2, cpu=2), 3.0))[0], StartContainer)
