"""One scheduling round: the fairness policy picks the job, the placement policy picks
the node. Pure apart from the Cluster it reads views from; the assignments it returns
are committed by the caller."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from tcluster.model import Job, Task, TaskState
from tcluster.scheduler.fairness import FairnessPolicy
from tcluster.scheduler.placement import PlacementPolicy
from tcluster.scheduler.reasons import pending_reason
from tcluster.scheduler.views import JobView, NodeView


@dataclass(frozen=True)
class RoundResult:
    placements: list[tuple[Task, str]]
    pending_reasons: dict[str, str]      # job id -> why its next task waits


def job_views(jobs: dict[str, Job], tasks: dict[str, list[Task]]) -> list[JobView]:
    views = []
    for job_id, job_tasks in tasks.items():
        pending = sum(1 for t in job_tasks if t.state is TaskState.PENDING)
        job = jobs[job_id]
        if pending and not job.cancelled:
            running = sum(1 for t in job_tasks if t.state.holds_resources)
            views.append(JobView(job_id, job.spec.queue, job.submitted_at, job.spec.resources, pending, running))
    return views


def schedule_round(
    jobs: dict[str, Job], tasks: dict[str, list[Task]], nodes: list[NodeView],
    fairness: FairnessPolicy, placement: PlacementPolicy, rng: random.Random,
) -> RoundResult:
    views = job_views(jobs, tasks)
    capacity = sum((n.capacity for n in nodes), start=nodes[0].capacity.times(0)) if nodes else None
    free = {n.name: n for n in nodes}
    waiting = {v.job_id: [t for t in tasks[v.job_id] if t.state is TaskState.PENDING] for v in views}
    placements: list[tuple[Task, str]] = []
    reasons: dict[str, str] = {}
    if capacity is None:
        return RoundResult([], {v.job_id: "no nodes are ready" for v in views})
    fairness_round = fairness.start_round(views, capacity)
    while (job_id := fairness_round.next_job()) is not None:
        request = jobs[job_id].spec.resources
        ordered = list(free.values())
        node = placement.place(request, ordered, rng)
        if node is None:
            reasons[job_id] = pending_reason(request, ordered)
            fairness_round.skip(job_id)
            continue
        placements.append((waiting[job_id].pop(0), node))
        free[node] = replace(free[node], free=free[node].free - request)
        fairness_round.placed(job_id)
    return RoundResult(placements, reasons)
