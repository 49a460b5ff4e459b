"""The seams between the master's service and its features, as Protocols.

- `MasterPort`: what a feature (LoTES, the federation LM) may read of the service and
  ask of it. Features get this, never the MasterService itself.
- `Plugins`: what the composition root (master/app/assemble.py) plugged into the service:
  step listeners, and `LotesHooks`, `Preemption`, `Observer`, which the service itself
  calls; each is optional.
- The change feed (every applied step) is master/core/feed.py's `AppliedStep`, handed to
  each `StepListener` in `MasterService.listeners`.

Types only: this module imports no feature and no service."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Protocol

from tcluster.domain.gpuusage import GpuSample
from tcluster.master.core.events import Action, Event, Outbound, Preempt, Step
from tcluster.master.core.feed import StepListener
from tcluster.master.core.state import MasterState
from tcluster.domain.model import Job, JobSpec, Task
from tcluster.domain.resources import Resources
from tcluster.scheduler.matching import EligibleCache
from tcluster.scheduler.queues import QueueTree
from tcluster.scheduler.reservations import Reservations
from tcluster.scheduler.windows import Windows

# The service's one way to change state: decide, apply, queue the rows (MasterService._do).
Do = Callable[[Event], tuple[Step, "asyncio.Future[None]"]]


class MasterPort(Protocol):
    """The service as a feature sees it: the state (read only), clocks, and requests
    that go through the service's one way to change state (events, written first)."""

    clock: Callable[[], float]        # unix seconds
    monotonic: Callable[[], float]    # every timeout

    @property
    def state(self) -> MasterState: ...

    @property
    def queues(self) -> QueueTree: ...

    def kick(self) -> None:
        """A scheduling round soon."""

    def broadcast(self, message_for: Callable[[str], Outbound]) -> None:
        """Sends each connected node its own message."""

    def get(self, job_id: str) -> tuple[Job, list[Task]]: ...

    async def written(self, job_id: str) -> bool:
        """Whether the job is in the store once every write queued so far is durable."""

    async def submit_pinned(self, spec: JobSpec, node: str, job_ids: Iterable[str] = ()) -> str: ...

    async def preempt(self, victims: tuple[tuple[str, int, str, str], ...]) -> None: ...

    async def cancel(self, job_id: str) -> tuple[Job, list[Task]]: ...


class LotesHooks(Protocol):
    """What the service and its edge call on LoTES (master/features/lotes_live.py)."""

    def submitted(self, spec: JobSpec) -> None: ...

    def reloaded(self) -> None: ...

    def decorate(self, action: Action) -> Action: ...

    def check(self) -> None: ...

    def heartbeat(self, node: str, class_mix: Mapping[int, int]) -> None: ...

    def klass(self, resources: Resources) -> int | None: ...

    def node_view(self, node: str) -> object: ...

    def status_view(self) -> object: ...


class Observer(Protocol):
    """The dashboard's recorder, beside its step listening: rounds and GPU samples."""

    def on_round(self, seconds: float, placed: int) -> None: ...

    def on_gpus(self, samples: tuple[GpuSample, ...], wall: float) -> None: ...


class Preemption(Protocol):
    """--preemption (master/features/preempting.py): after each round, and when the state is loaded."""

    def restore(self, state: MasterState, book: Reservations, now: float) -> None: ...

    def after_round(self, state: MasterState, tree: QueueTree, book: Reservations, cache: EligibleCache, now: float,
                    do: Callable[[Preempt], object], reasons: dict[str, str],
                    windows: Windows | None = None) -> dict[str, str]: ...


@dataclass
class Plugins:
    """What the composition root (master/app/assemble.py) plugs into one service; shared by
    the service's parts (Agents, Rounds). Each is optional."""

    listeners: list[StepListener] = field(default_factory=list)   # every applied step, in this order
    lotes: LotesHooks | None = None            # --placement lotes
    preemption: Preemption | None = None       # --preemption
    observer: Observer | None = None           # the dashboard's recorder: rounds and GPU samples


__all__ = ["Do", "LotesHooks", "MasterPort", "Observer", "Plugins", "Preemption"]
