"""One row of `tcl queues`: a queue's weight, guaranteed share and what it holds now. A plain
value on the ground floor, so that the JSON views and the wire codec take it as they take
a Job; the scheduler computes the rows (scheduler/queuestats.py)."""

from __future__ import annotations

from dataclasses import dataclass

from tcluster.domain.resources import Resources


@dataclass(frozen=True)
class QueueRow:
    path: str
    name: str
    parent: str
    depth: int
    leaf: bool
    weight: float
    guaranteed_share: float
    dominant_share: float
    allocated: Resources
    running_tasks: int
    pending_tasks: int
    running_jobs: int
    pending_jobs: int
    in_tree: bool = True
    user: str = ""                # a user's row under its leaf (share: users): path is "leaf/user"
    decayed_usage_s: float = 0.0  # decayed dominant share-seconds (--usage-half-life); 0 without
