"""Read-only values the policies see. The master (or simulator) owns the real state."""

from __future__ import annotations

from dataclasses import dataclass

from tcluster.resources import Resources


@dataclass(frozen=True)
class JobView:
    job_id: str
    queue: str
    submitted_at: float
    demand: Resources           # one task's request
    pending: int                # tasks waiting to be placed
    running: int = 0            # tasks holding resources
    weight: float = 1.0

    @property
    def allocated(self) -> Resources:
        return self.demand.times(self.running)
