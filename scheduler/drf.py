"""`drf`: flat weighted Dominant Resource Fairness over jobs (Ghodsi et al., NSDI 2011).

Each pick goes to the job with the lowest weighted dominant share, running x mu / weight,
where mu is one task's largest share of any resource of the READY cluster. Queues are
ignored: every job is a sibling of every other, which is what `hdrf` and `mch` improve
on. A heap keyed by the weighted share makes each pick O(log p); entries made stale by
a pick are skipped when they surface (lazy deletion)."""

from __future__ import annotations

import heapq
from typing import Sequence

from tcluster.domain.resources import Resources
from tcluster.scheduler.fairshare import Axes, SaturationIndex, share_key
from tcluster.scheduler.queues import QueueTree
from tcluster.scheduler.views import JobView


class _DrfRound:
    def __init__(self, jobs: Sequence[JobView], capacity: Resources) -> None:
        axes = Axes.of(capacity)
        live = [j for j in jobs if j.pending > 0]
        # per job: [step = mu / weight, running, pending, version, submitted_at]
        self._state = {j.job_id: [axes.shape(j.demand).mu / j.weight, j.running, j.pending, 0, j.submitted_at]
                       for j in live}
        # (share key, submitted_at, job, version): the version as the state holds it
        self._heap: list[tuple[float, float, str, float]] = [
            (share_key(s[0] * s[1]), s[4], job_id, 0) for job_id, s in self._state.items()]
        heapq.heapify(self._heap)
        self._saturation = SaturationIndex(live)

    def next_job(self) -> str | None:
        heap, state = self._heap, self._state
        while heap:
            _, _, job_id, version = heap[0]
            if state[job_id][3] == version:
                return job_id
            heapq.heappop(heap)
        return None

    def placed(self, job_id: str) -> None:
        s = self._state[job_id]
        s[1] += 1
        s[2] -= 1
        s[3] += 1
        if s[2] <= 0:
            return  # satisfied: its stale entry is dropped when it surfaces
        entry = (share_key(s[0] * s[1]), s[4], job_id, s[3])
        if self._heap and self._heap[0][2] == job_id:
            heapq.heapreplace(self._heap, entry)
        else:
            heapq.heappush(self._heap, entry)

    def skip(self, job_id: str) -> None:
        if job_id in self._state:
            self._state[job_id][3] += 1   # invalidates its heap entry

    def limit(self, largest_free: Resources) -> None:
        for job_id in self._saturation.limit(largest_free):
            self.skip(job_id)


class DrfPolicy:
    name = "drf"

    def start_round(self, jobs: Sequence[JobView], capacity: Resources,
                    queues: QueueTree | None = None) -> _DrfRound:
        return _DrfRound(jobs, capacity)
