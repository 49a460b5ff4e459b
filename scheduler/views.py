"""Read-only values the policies see. The master (or simulator) owns the real state."""

from __future__ import annotations

from dataclasses import dataclass

from tcluster.domain.resources import Resources


@dataclass(frozen=True)
class JobView:
    job_id: str
    queue: str
    submitted_at: float
    demand: Resources           # one task's request
    pending: int                # tasks waiting to be placed
    running: int = 0            # tasks holding resources
    weight: float = 1.0
    user: str = ""              # its owner: a leaf with `share: users` shares by user first

    @property
    def allocated(self) -> Resources:
        return self.demand.times(self.running)


@dataclass(frozen=True)
class NodeSpec:
    """A node as a `tcl sim` scenario or a `tcl pack` study declares it."""
    name: str
    capacity: Resources
    labels: tuple[tuple[str, str], ...] = ()
