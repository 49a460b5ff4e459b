"""`hdrf`: hierarchical DRF (Bhattacharya et al., SoCC 2013), the exact reference.

Every pick walks the whole tree bottom-up, so a pick costs O(q) and a round O(q^2)
in the worst case; `mch` makes the same decisions faster and is checked against this.

Dynamic H-DRF, as in the paper, computes an internal node's dominant share from its
non-blocked children only ("ignoring blocked nodes"), after rescaling each child's
consumption so that its weighted dominant share equals the smallest among them
("rescaling to minimum nodes"). So a queue's share is m x mu, where m is its children's
smallest weighted dominant share and mu the dominant component of the sum of their
normalized demands, weighted. Rescaling is what keeps dove-tailing jobs (one asking
<1 CPU, 0 GB>, its sibling <0 CPU, 1 GB>) from making their parent look richer than it
is, and ignoring blocked children is what lets the others go on when a resource
saturates. A job is blocked once it has no pending task, or the loop found it fits
nowhere (skip), or no node has room for it any more (limit).

The user level (scheduler/usershare.py): a user's node under a leaf competes with its
dominant share of all its tasks hold there, not its best job's rescaled share."""

from __future__ import annotations

from typing import Mapping, Sequence

from tcluster.domain.resources import Resources
from tcluster.scheduler.fairshare import Axes, SaturationIndex, share_key, tie_key
from tcluster.scheduler.fairtree import QueueIndex
from tcluster.scheduler.queues import QueueTree
from tcluster.scheduler.usershare import Held, held_from_views
from tcluster.scheduler.views import JobView

# (weighted share rounded for comparing, tie, job id, the exact weighted share). The
# exact value is what the parent computes with, so rounding never compounds up the tree.
Candidate = tuple[float, tuple[float, str], str, float]


class _Leaf:
    __slots__ = ("weight", "mu", "normalized", "shares", "node", "running", "pending", "tie", "active")

    def __init__(self, job: JobView, axes: Axes, node: int) -> None:
        shape = axes.shape(job.demand)
        self.node = node
        self.shares = shape.shares
        self.weight = job.weight
        self.mu = shape.mu
        self.normalized = shape.normalized
        self.running = job.running
        self.pending = job.pending
        self.tie = tie_key(job)
        self.active = job.pending > 0


class _HdrfRound:
    def __init__(self, jobs: Sequence[JobView], capacity: Resources, queues: QueueTree | None,
                 held: Held | None = None) -> None:
        axes = Axes.of(capacity)
        self._kinds = len(axes.kinds)
        self._index = QueueIndex(queues)
        live = [j for j in jobs if j.pending > 0]
        located = [(self._index.locate_job(j.queue, j.user), j) for j in live]
        self._jobs_at: list[list[tuple[str, _Leaf]]] = [[] for _ in range(len(self._index))]
        self._leaves: dict[str, _Leaf] = {}
        self._user_held = user_shares(self._index.user_of, held_from_views(jobs) if held is None else held, axes)
        for node, job in located:
            leaf = _Leaf(job, axes, node)
            self._leaves[job.job_id] = leaf
            self._jobs_at[node].append((job.job_id, leaf))
        self._saturation = SaturationIndex(live)

    def next_job(self) -> str | None:
        index, kinds = self._index, self._kinds
        best_of: list[Candidate | None] = [None] * len(index)
        normalized: list[list[float]] = [[]] * len(index)
        for node in range(len(index) - 1, -1, -1):   # children before parents
            best: Candidate | None = None
            total = [0.0] * kinds
            for job_id, leaf in self._jobs_at[node]:
                if leaf.active:
                    share = leaf.running * leaf.mu / leaf.weight
                    best = _better(best, (share_key(share), leaf.tie, job_id, share))
                    _accumulate(total, leaf.normalized, leaf.weight)
            for child in index.children[node]:
                child_best = best_of[child]
                if child_best is not None:
                    best = _better(best, child_best)
                    _accumulate(total, normalized[child], index.weight[child])
            if best is None or node == 0:
                best_of[node] = best
                continue
            mu = max(total, default=0.0)
            if node in index.user_of:   # a user: its dominant share of all it holds, per unit weight
                held = max(self._user_held[node], default=0.0) / index.weight[node]
                best_of[node] = (share_key(held), best[1], best[2], held)
                normalized[node] = [x / mu for x in total] if mu > 0 else total
                continue
            # The rescaled share of this queue, m x mu, seen by its parent per unit weight.
            share = best[3] * mu / index.weight[node]
            best_of[node] = (share_key(share), best[1], best[2], share)
            normalized[node] = [x / mu for x in total] if mu > 0 else total
        return best_of[0][2] if best_of[0] is not None else None

    def placed(self, job_id: str) -> None:
        leaf = self._leaves[job_id]
        leaf.running += 1
        leaf.pending -= 1
        leaf.active = leaf.active and leaf.pending > 0
        held = self._user_held.get(leaf.node)
        if held is not None:
            for i, x in enumerate(leaf.shares):
                held[i] += x

    def skip(self, job_id: str) -> None:
        if job_id in self._leaves:
            self._leaves[job_id].active = False

    def limit(self, largest_free: Resources) -> None:
        for job_id in self._saturation.limit(largest_free):
            self.skip(job_id)


def user_shares(users: Mapping[int, tuple[str, str]], held: Held, axes: Axes) -> dict[int, list[float]]:
    """Per user node: what its tasks hold in its leaf, as shares of each kind."""
    return {node: list(axes.shape(held.get(key, Resources())).shares) for node, key in users.items()}


def _better(best: Candidate | None, candidate: Candidate) -> Candidate:
    return candidate if best is None or candidate < best else best


def _accumulate(total: list[float], vector: Sequence[float], weight: float) -> None:
    for i, x in enumerate(vector):
        total[i] += weight * x


class HdrfPolicy:
    name = "hdrf"

    def start_round(self, jobs: Sequence[JobView], capacity: Resources,
                    queues: QueueTree | None = None, held: Held | None = None) -> _HdrfRound:
        return _HdrfRound(jobs, capacity, queues, held)
