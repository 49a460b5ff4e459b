"""One scheduling round: the fairness policy picks the job, the placement policy picks
the node over the vectorized node state. Pure apart from the NodeMatrix it borrows:
allocations made during the round are tentative and undone exactly before it returns; the
caller commits the placements it gets back."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tcluster.constraints import parse_constraints
from tcluster.model import Job, Task, TaskState
from tcluster.scheduler.fairness import FairnessPolicy
from tcluster.scheduler.matching import EligibleCache
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import PlacementPolicy
from tcluster.scheduler.reasons import unplaceable_reason
from tcluster.scheduler.views import JobView


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
    jobs: dict[str, Job], tasks: dict[str, list[Task]], nodes: NodeMatrix,
    fairness: FairnessPolicy, placement: PlacementPolicy, rng: random.Random,
    eligible_cache: EligibleCache | None = None,
) -> RoundResult:
    views = job_views(jobs, tasks)
    view = nodes.view()
    if not view.schedulable.any():
        return RoundResult([], {v.job_id: "no nodes are ready" for v in views})
    cache = eligible_cache or EligibleCache()
    waiting = {v.job_id: [t for t in tasks[v.job_id] if t.state is TaskState.PENDING] for v in views}
    placements: list[tuple[Task, str]] = []
    reasons: dict[str, str] = {}
    fairness_round = fairness.start_round(views, nodes.total_capacity())
    with nodes.tentative():
        while (job_id := fairness_round.next_job()) is not None:
            spec = jobs[job_id].spec
            constraints = parse_constraints(spec.constraints)
            eligible = cache.eligible(constraints, nodes)
            request = view.request_vector(spec.resources)
            row = None if request is None else placement.choose(request, view, eligible, rng)
            if row is None:
                reasons[job_id] = unplaceable_reason(spec.resources, constraints, nodes, eligible)
                fairness_round.skip(job_id)
                continue
            node = view.names[row]
            nodes.allocate(node, spec.resources)
            placements.append((waiting[job_id].pop(0), node))
            fairness_round.placed(job_id)
    return RoundResult(placements, reasons)
