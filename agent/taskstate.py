"""The agent's task state machine, sans-IO: `AgentTasks.handle(event) -> [actions]`.

Keyed by (task_id, attempt). Phases: LAUNCHING (the container is being made), RUNNING,
KILLING (SIGTERM sent, SIGKILL after the grace period); an attempt that has EXITED is
reported once and forgotten. The daemon carries out the actions (runtime calls, timers,
the outbox) and feeds their results back as events. Rules:
- a second launch of the same attempt is a no-op; a launch of another attempt while one
  is still here is refused (reported `rejected`), never dropped silently;
- a kill that arrives while the container is still being made is kept and carried out
  as soon as the launch finishes; a kill for an attempt that is not here is answered
  with KILLED, so the master's kill intent always ends;
- a launch that asks for GPUs is bound to the lowest free device indices this node offers;
  the binding is held by the attempt (so it is released exactly once, when the attempt
  leaves: exit, failed launch) and rebuilt from the launch records after a restart;
- cut off from the master past the fence, attempts the master may start again elsewhere
  (jobs with retries) are killed, so two copies of one task never run at once."""

from __future__ import annotations

import signal
from dataclasses import dataclass, replace
from enum import Enum

from tcluster.agent.gpus import GPU, pick, requested
from tcluster.agent.runtime.base import ExitStatus
from tcluster.domain.launch import Launch
from tcluster.domain.model import TaskState, TaskUsage
from tcluster.domain.reports import TaskReport
from tcluster.domain.resources import Resources


class Phase(str, Enum):
    LAUNCHING = "LAUNCHING"
    RUNNING = "RUNNING"
    KILLING = "KILLING"


@dataclass(frozen=True)
class Attempt:
    request: Launch
    phase: Phase
    kill_reason: str = ""          # set once a kill was asked for (also while LAUNCHING)
    gpus: tuple[int, ...] = ()     # device indices bound to this attempt
    kill_grace_s: float = 0.0      # the kill's SIGTERM..SIGKILL; 0: the agent's --kill-grace-s


# ---- events ----

@dataclass(frozen=True)
class LaunchAsked:
    request: Launch
    at: float


@dataclass(frozen=True)
class Launched:
    key: str
    at: float


@dataclass(frozen=True)
class LaunchFailed:
    key: str
    reason: str
    at: float


@dataclass(frozen=True)
class Adopted:
    """Found on disk after an agent restart, still running or ended meanwhile."""
    request: Launch
    gpus: tuple[int, ...] = ()     # its binding, from its launch record


@dataclass(frozen=True)
class KillAsked:
    task_id: str
    attempt: int
    reason: str
    at: float
    grace_s: float = 0.0           # 0: the agent's --kill-grace-s (a preemption asks for its own)


@dataclass(frozen=True)
class GraceOver:
    key: str


@dataclass(frozen=True)
class Exited:
    key: str
    status: ExitStatus
    usage: TaskUsage | None
    at: float


@dataclass(frozen=True)
class CutOff:
    seconds: float
    at: float


AgentEvent = LaunchAsked | Launched | LaunchFailed | Adopted | KillAsked | GraceOver | Exited | CutOff


# ---- actions ----

@dataclass(frozen=True)
class StartContainer:
    request: Launch
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class WatchExit:
    key: str


@dataclass(frozen=True)
class Signal:
    key: str
    signum: int


@dataclass(frozen=True)
class ArmGrace:
    key: str
    grace_s: float = 0.0           # 0: the agent's --kill-grace-s


@dataclass(frozen=True)
class Report:
    report: TaskReport


@dataclass(frozen=True)
class RemoveContainer:
    key: str


AgentAction = StartContainer | WatchExit | Signal | ArmGrace | Report | RemoveContainer


class AgentTasks:
    def __init__(self, capacity: Resources, reserved: Resources, gpus: tuple[int, ...] = ()) -> None:
        self.capacity = capacity
        self.reserved = reserved
        self.gpus = gpus                              # the device indices this node offers
        self.attempts: dict[str, Attempt] = {}        # by key "<task_id>.<attempt>"

    # ---- queries ----

    def by_task(self, task_id: str) -> Attempt | None:
        return next((a for a in self.attempts.values() if a.request.task_id == task_id), None)

    def free(self) -> Resources:
        used = sum((a.request.resources for a in self.attempts.values()), Resources())
        return (self.capacity - self.reserved - used).clamp_nonnegative()

    def live(self) -> list[Launch]:
        return [a.request for a in self.attempts.values()]

    def held_gpus(self) -> dict[int, str]:
        """Device index -> the key of the attempt holding it."""
        return {i: key for key, a in self.attempts.items() for i in a.gpus}

    def gpus_of(self, key: str) -> tuple[int, ...]:
        attempt = self.attempts.get(key)
        return attempt.gpus if attempt is not None else ()

    # ---- the one way in ----

    def handle(self, event: AgentEvent) -> list[AgentAction]:
        return _HANDLERS[type(event)](self, event)

    def _launch(self, ev: LaunchAsked) -> list[AgentAction]:
        r = ev.request
        if r.key in self.attempts:
            return []                                  # the same launch again: already here
        other = self.by_task(r.task_id)
        if other is not None:
            why = f"attempt {other.request.attempt} of this task is still on this node"
            return [_report(r, TaskState.FAILED, ev.at, reason=why, rejected=True)]
        short = r.resources.shortfall(self.free())
        if short:
            why = f"not enough {', '.join(short)} free on this node ({self.free().describe()})"
            return [_report(r, TaskState.FAILED, ev.at, reason=why, rejected=True)]
        want = requested(r.resources.get(GPU))
        gpus = pick(self.gpus, self.held_gpus(), want) if want else ()
        if gpus is None:
            why = f"{want} GPU(s) asked, {len(self.gpus) - len(self.held_gpus())} of {len(self.gpus)} free on this node"
            return [_report(r, TaskState.FAILED, ev.at, reason=why, rejected=True)]
        self.attempts[r.key] = Attempt(r, Phase.LAUNCHING, gpus=gpus)
        return [StartContainer(r, gpus)]

    def _launched(self, ev: Launched) -> list[AgentAction]:
        attempt = self.attempts.get(ev.key)
        if attempt is None:
            return [RemoveContainer(ev.key)]
        actions: list[AgentAction] = [_report(attempt.request, TaskState.RUNNING, ev.at, gpus=attempt.gpus),
                                      WatchExit(ev.key)]
        if attempt.kill_reason:
            self.attempts[ev.key] = replace(attempt, phase=Phase.KILLING)
            return actions + [Signal(ev.key, signal.SIGTERM), ArmGrace(ev.key, attempt.kill_grace_s)]
        self.attempts[ev.key] = replace(attempt, phase=Phase.RUNNING)
        return actions

    def _launch_failed(self, ev: LaunchFailed) -> list[AgentAction]:
        attempt = self.attempts.pop(ev.key, None)
        if attempt is None:
            return []
        if attempt.kill_reason:
            return [_report(attempt.request, TaskState.KILLED, ev.at, reason=attempt.kill_reason)]
        return [_report(attempt.request, TaskState.FAILED, ev.at, reason=ev.reason)]

    def _adopted(self, ev: Adopted) -> list[AgentAction]:
        self.attempts[ev.request.key] = Attempt(ev.request, Phase.RUNNING, gpus=ev.gpus)
        return [WatchExit(ev.request.key)]

    def _kill(self, ev: KillAsked) -> list[AgentAction]:
        attempt = self.attempts.get(f"{ev.task_id}.{ev.attempt}")
        reason = ev.reason or "killed"
        if attempt is None:
            gone = Launch(ev.task_id, ev.attempt, "", 0, None)
            return [_report(gone, TaskState.KILLED, ev.at, reason=f"{reason} (not running on this node)")]
        key = attempt.request.key
        if attempt.kill_reason:
            return []                                  # already being killed
        if attempt.phase is Phase.LAUNCHING:
            self.attempts[key] = replace(attempt, kill_reason=reason, kill_grace_s=ev.grace_s)
            return []                                  # carried out once the launch finishes
        self.attempts[key] = replace(attempt, phase=Phase.KILLING, kill_reason=reason, kill_grace_s=ev.grace_s)
        return [Signal(key, signal.SIGTERM), ArmGrace(key, ev.grace_s)]

    def _grace_over(self, ev: GraceOver) -> list[AgentAction]:
        attempt = self.attempts.get(ev.key)
        if attempt is None or attempt.phase is not Phase.KILLING:
            return []
        return [Signal(ev.key, signal.SIGKILL)]

    def _exited(self, ev: Exited) -> list[AgentAction]:
        attempt = self.attempts.pop(ev.key, None)
        if attempt is None:
            return [RemoveContainer(ev.key)]
        s = ev.status
        if attempt.kill_reason:
            state, reason = TaskState.KILLED, attempt.kill_reason
        elif s.fenced:          # the shim's own fence (agent/shim.c): as the agent's cut_off would
            state, reason = TaskState.KILLED, s.reason
        elif s.exit_code == 0:
            state, reason = TaskState.SUCCEEDED, ""
        else:
            state, reason = TaskState.FAILED, s.reason or describe_exit(s.exit_code, s.signal)
        report = _report(attempt.request, state, s.finished_at or ev.at, reason=reason, exit_code=s.exit_code,
                         signal_=s.signal, usage=ev.usage)
        # Reported (on disk in the outbox) before the container is removed: an agent that
        # dies in between finds the exit record again after its restart.
        return [report, RemoveContainer(ev.key)]

    def _cut_off(self, ev: CutOff) -> list[AgentAction]:
        actions: list[AgentAction] = []
        for attempt in list(self.attempts.values()):
            spec = attempt.request.spec
            if spec is not None and spec.retries > 0:
                why = f"cut off from the master for {ev.seconds:.0f}s; the task may run elsewhere"
                actions += self._kill(KillAsked(attempt.request.task_id, attempt.request.attempt, why, ev.at))
        return actions


_HANDLERS = {
    LaunchAsked: AgentTasks._launch, Launched: AgentTasks._launched, LaunchFailed: AgentTasks._launch_failed,
    Adopted: AgentTasks._adopted, KillAsked: AgentTasks._kill, GraceOver: AgentTasks._grace_over,
    Exited: AgentTasks._exited, CutOff: AgentTasks._cut_off,
}


def _report(request: Launch, state: TaskState, at: float, *, reason: str = "", exit_code: int | None = None,
            signal_: int = 0, usage: TaskUsage | None = None, rejected: bool = False,
            gpus: tuple[int, ...] = ()) -> Report:
    return Report(TaskReport(task_id=request.task_id, attempt=request.attempt, state=state, exit_code=exit_code,
                             signal=signal_, reason=reason, at=at, usage=usage, rejected=rejected, gpus=gpus))


def describe_exit(exit_code: int | None, signum: int) -> str:
    if signum:
        try:
            return f"killed by {signal.Signals(signum).name}"
        except ValueError:
            return f"killed by signal {signum}"
    return f"exited with code {exit_code}"
