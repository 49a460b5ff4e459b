"""The fairness seam: which job's pending task goes next.

A policy opens a round over the jobs that have pending tasks; the scheduling loop asks
`next_job()`, tries to place one task of it, and reports back with `placed()` (the job
got one task's resources) or `skip()` (it fits nowhere now, so the round moves on to
other jobs: no head-of-line blocking). After each placement the loop also says how much
the roomiest node has left of each kind (`limit()`): a job asking for more is blocked
for the rest of the round, which is how a saturated resource stops the jobs that need it
while the others go on (H-DRF's blocked nodes). A round is stateful so that a heap-based
policy can update in O(log n) per pick.

Policies: `fifo`, `drf` (flat weighted DRF over jobs), `hdrf` (hierarchical DRF, the
exact reference) and `mch` (Multi-resource Collapsed Hierarchies, the default)."""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.resources import Resources
from tcluster.scheduler.drf import DrfPolicy
from tcluster.scheduler.hdrf import HdrfPolicy
from tcluster.scheduler.mch import MchPolicy
from tcluster.scheduler.queues import QueueTree
from tcluster.scheduler.usershare import Held
from tcluster.scheduler.views import JobView

DEFAULT_FAIRNESS = "mch"


class FairnessRound(Protocol):
    def next_job(self) -> str | None:
        """The job whose pending task should be tried next; None when none is left."""

    def placed(self, job_id: str) -> None:
        """One task of `job_id` was placed."""

    def skip(self, job_id: str) -> None:
        """`job_id`'s next task fits nowhere now; do not offer it again this round."""

    def limit(self, largest_free: Resources) -> None:
        """No node has more than `largest_free` of any kind free now; jobs whose task asks
        for more of some kind are blocked for the rest of the round."""


class FairnessPolicy(Protocol):
    name: str

    def start_round(self, jobs: Sequence[JobView], capacity: Resources,
                    queues: QueueTree | None = None, held: Held | None = None) -> FairnessRound:
        """`capacity` is the total of READY nodes; `queues` the tree jobs hang off
        (None: every job in one flat queue); `held`: what each (leaf, user) holds over all
        its jobs (scheduler/usershare.py; None: what `jobs` hold)."""


class _FifoRound:
    def __init__(self, jobs: Sequence[JobView]) -> None:
        ordered = sorted(jobs, key=lambda j: (j.submitted_at, j.job_id))
        self._order = [j.job_id for j in ordered if j.pending > 0]
        self._pending = {j.job_id: j.pending for j in ordered}
        self._skipped: set[str] = set()
        self._cursor = 0

    def next_job(self) -> str | None:
        while self._cursor < len(self._order):
            job_id = self._order[self._cursor]
            if self._pending[job_id] > 0 and job_id not in self._skipped:
                return job_id
            self._cursor += 1
        return None

    def placed(self, job_id: str) -> None:
        self._pending[job_id] -= 1

    def skip(self, job_id: str) -> None:
        self._skipped.add(job_id)

    def limit(self, largest_free: Resources) -> None:
        """FIFO finds out by trying: a job that does not fit is skipped when reached."""


class FifoPolicy:
    """First come, first served by submit time; a job that does not fit is passed over."""

    name = "fifo"

    def start_round(self, jobs: Sequence[JobView], capacity: Resources,
                    queues: QueueTree | None = None, held: Held | None = None) -> FairnessRound:
        return _FifoRound(jobs)


FAIRNESS_POLICIES: dict[str, Callable[[], FairnessPolicy]] = {
    "fifo": FifoPolicy, "drf": DrfPolicy, "hdrf": HdrfPolicy, "mch": MchPolicy,
}


def make_fairness(name: str) -> FairnessPolicy:
    try:
        return FAIRNESS_POLICIES[name]()
    except KeyError:
        allowed = ", ".join(sorted(FAIRNESS_POLICIES))
        raise InvalidArgument("fairness", f"unknown policy {name!r}; choose one of: {allowed}") from None
