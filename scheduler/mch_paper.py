"""MCH's static weights as section III of the paper states them (You et al., IEEE Comm.
Letters 2019): the reading `tcl sim` reports and the Figure 4 test checks, computed with
the same flattening the live policy keeps incrementally (scheduler/mch.py)."""

from __future__ import annotations

from typing import Sequence

from tcluster.domain.resources import Resources
from tcluster.scheduler.mch import MchState
from tcluster.scheduler.queues import QueueTree
from tcluster.scheduler.views import JobView


def paper_weights(jobs: Sequence[JobView], capacity: Resources,
                  queues: QueueTree | None) -> tuple[dict[str, float], str | None]:
    """Section III's static weights of `jobs` (all taken as active), and k'.

    k' is the kind the root's normalized demand is largest in: the first to saturate
    when every job grows at its flattened weight from an empty cluster. Jobs that need
    k' (full-type, and partial-type sub-case 2) get the product weight. The others
    (sub-case 1) get their weight in the tree flattened again without the k' jobs."""
    state = MchState(queues, capacity)
    for job in jobs:
        state.add(job if job.pending > 0 else _with_pending(job))
    full = state.weights()
    demand = state.root_demand()
    if not any(demand):
        return full, None
    k = max(range(len(demand)), key=lambda i: demand[i])
    needs_k = [j.job_id for j in jobs if state.axes.shape(j.demand).shares[k] > 0]
    for job_id in needs_k:
        state.block(job_id)
    residual = state.weights()
    return {j.job_id: full[j.job_id] if j.job_id in needs_k else residual[j.job_id] for j in jobs}, state.axes.kinds[k]


def _with_pending(job: JobView) -> JobView:
    return JobView(job.job_id, job.queue, job.submitted_at, job.demand, 1, job.running, job.weight)
