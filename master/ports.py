"""The seams between the master's service and its features, as Protocols.

- `MasterPort`: what a feature (LoTES, the federation LM) may read of the service and
  ask of it. Features get this, never the MasterService itself.
- `LotesHooks`, `Observer`: what the service itself calls on a feature the composition
  root plugged in (master/server.py); both are optional.
- The change feed (every applied step) is master/core/feed.py's `AppliedStep`, handed to
  each `StepListener` in `MasterService.listeners`.

Types only: this module imports no feature and no service."""

from __future__ import annotations

from typing import Callable, Mapping, Protocol

from tcluster.gpuusage import GpuSample
from tcluster.master.core.events import Outbound
from tcluster.master.core.state import MasterState
from tcluster.model import Job, JobSpec, Task
from tcluster.resources import Resources
from tcluster.scheduler.queues import QueueTree


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

    async def submit_pinned(self, spec: JobSpec, node: str) -> str: ...

    async def preempt(self, victims: tuple[tuple[str, int, str, str], ...]) -> None: ...

    async def cancel(self, job_id: str) -> tuple[Job, list[Task]]: ...


class LotesHooks(Protocol):
    """What the service and its edge call on LoTES (master/lotes_live.py)."""

    def submitted(self, spec: JobSpec) -> None: ...

    def reloaded(self) -> None: ...

    def decorate(self, action: object) -> object: ...

    def check(self) -> None: ...

    def heartbeat(self, node: str, class_mix: Mapping[int, int]) -> None: ...

    def klass(self, resources: Resources) -> int | None: ...

    def node_view(self, node: str) -> object: ...

    def status_view(self) -> object: ...


class Observer(Protocol):
    """The dashboard's recorder, beside its step listening: rounds and GPU samples."""

    def on_round(self, seconds: float, placed: int) -> None: ...

    def on_gpus(self, samples: tuple[GpuSample, ...], wall: float) -> None: ...


__all__ = ["LotesHooks", "MasterPort", "Observer"]
