"""The master's change feed: one value per applied step, for whoever listens.

The service decides a step (transitions.handle), applies it in memory, queues its rows
(the committer), and then hands every registered listener one `AppliedStep`, in the
order the composition root registered them (master/app/assemble.py). A listener must not
raise and must not change the state: it follows it (counters, dashboards, the LoTES
book, a federation LM's GMs). Values only: no I/O here."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Mapping, Protocol

from tcluster.master.core.events import Event, Now, Step
from tcluster.domain.model import Task


@dataclass(frozen=True)
class AppliedStep:
    """A step as the service applied it.

    `before`: the step's tasks as they were before it (None: new); `reconnected`: the
    nodes whose stream this step attached or detached; `durable`: completes once the
    step's rows are written (None for a step fed by hand, e.g. by a test: durable at once)."""
    event: Event
    step: Step
    now: Now
    durable: asyncio.Future[None] | None = None
    before: Mapping[str, Task | None] = field(default_factory=dict)
    reconnected: frozenset[str] = frozenset()


class StepListener(Protocol):
    def on_step(self, applied: AppliedStep) -> None:
        """Called after every applied step, on the service's loop."""


__all__ = ["AppliedStep", "StepListener"]
