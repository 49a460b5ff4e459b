"""The launch of one task attempt, from the master to an agent: one record type for both
ends of the LaunchTask message (its protobuf codec is `wire.launch_to_pb/launch_from_pb`,
the agent's launch.json record `agent/launchrecord.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from tcluster.domain.model import JobSpec
from tcluster.domain.resources import Resources


@dataclass(frozen=True)
class Launch:
    task_id: str
    attempt: int
    job_id: str
    index: int
    spec: JobSpec | None       # None only for an agent's kill of an attempt it does not have
    node: str = ""             # the master's addressee; not sent (the agent is that node)
    lotes_class: int | None = None     # LoTES: the task's class (-1: none; None: not lotes)
    preemptions: int = 0               # earlier attempts that were preempted (TCL_PREEMPTED)

    @property
    def key(self) -> str:
        return f"{self.task_id}.{self.attempt}"

    @property
    def resources(self) -> Resources:
        return self.spec.resources if self.spec is not None else Resources()
