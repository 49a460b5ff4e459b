"""Issue 35: a GM's Place is applied once also across LM restarts and failovers.

The GM sends a Place again, with the same request id, until one answer comes (its task stays
PLACING in the GM's store, across GM restarts too). The LM found the first job by the
master's request index, which holds only the jobs in memory, and by an in-memory list of the
latest 100,000: after a restart or failover, a repeat of a Place whose job had already left
memory (finished, past --resident-finished-jobs) was placed again, as a second job.

Now the job's id is derived from the request id: the first of `candidate_ids(request_id)`
that no job has (an id of 8 hex digits as every job's; a collision with another job moves to
the next). A repeat probes the same ids in the master's store, which keeps every job for
--job-retention after it ended (7 days by default): for that long, a repeat finds its first
job wherever it is, and gets its answer again, never a second job. The rule: a GM's resend
must come within --job-retention of the task's end, which it always does (a task leaves
PLACING at the GM with the first answer)."""

from __future__ import annotations

import hashlib
from typing import Callable, Iterator

from tcluster.domain.model import Job

PROBES = 16        # ids tried per request: a 16-fold 32-bit collision does not happen


def candidate_ids(request_id: str) -> Iterator[str]:
    for k in range(PROBES):
        yield hashlib.sha256(f"{request_id}\0{k}".encode()).hexdigest()[:8]


def placed_job(request_id: str, owner: str, load: Callable[[str], Job | None]) -> str | None:
    """The job a Place with this request id made, found by its derived ids; None: none did.
    `load` reads a job from memory or the store (None when no job has that id). The probe
    stops at the first free id: the first Place took the first free one."""
    for job_id in candidate_ids(request_id):
        job = load(job_id)
        if job is None:
            return None
        if job.spec.owner == owner and job.spec.request_id == request_id:
            return job_id
    return None
