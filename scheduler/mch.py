"""`mch`: Multi-resource Collapsed Hierarchies (You et al., IEEE Comm. Letters 2019).

MCH flattens the queue tree into weighted jobs and then runs weighted DRF.

* Normalized demands (eq. 2): a job's normalized demand is s = (d / c) / mu, where mu is
  one task's dominant share. A queue's demand is the weighted sum of its active
  children's normalized demands, S = sum w_c s_c. Its own mu is max(S), and it passes
  s = S / mu up to its parent.
* Weights: a job's flattened weight is its own weight times weight / mu of every queue
  above it, which is the paper's product of 1/mu_P(i) once weights are allowed.
  Equivalently, the key weighted DRF compares is running x mu_job / w_job x F(queue),
  where F is the product of mu / weight from the job's queue up to the root.
* Partial-type jobs: a job may ask for nothing of some resource, e.g. a memory-only job.
  Section III has two sub-cases. If the job needs the first resource to saturate (k'),
  its weight is the product above. If it needs only other resources, the paper gives it
  weight 1. We get that weight from the same rule. When k' saturates, the jobs that need
  it are blocked. They drop out of their queues' normalized demands, so the tree is
  flattened again over the jobs that can still grow. For the paper's case (Figures 3
  and 4) that gives exactly the weight 1. Before k' saturates, such a job keeps the
  product weight, the way H-DRF treats it. So `mch` makes the same picks as `hdrf` on
  every input, not only on those where the end state is the same. `mch_paper.paper_weights`
  gives the static weights of section III: 1, 1, 0.5, 0.5, 1, 1 for Figure 4.
* Heap: each queue keeps a heap of its jobs, keyed by running x mu / w. A global heap
  holds each queue's best job, keyed by F times that. A pick is O(log p). When a job
  arrives, leaves, is blocked or runs out of tasks, only its queues up the path are
  recomputed, O(depth x kinds) (scheduler/mchpropagate.py). If one of their mu changes,
  the queues under it get new F values (one walk of a precomputed preorder), and each
  queue's entry is re-keyed with one product (scheduler/mchfactors.py): a key that did not
  move keeps its entry, one that fell is re-filed at once, and one that rose keeps its
  entry, now a lower bound of its key, until it reaches the top: most queues see several
  new F between their turns and pay for the last one only. Picks are those of the eager
  re-filing, bit for bit (tests/unit/test_mch_equivalence.py).

The user level (scheduler/usershare.py): a user's node under a leaf is a queue for the
demands (eq. 2), but its key is F(leaf) x its dominant share of all it holds there, as
`hdrf` compares it; its jobs keep their own order inside it (scheduler/mchusers.py).

The state lives across rounds, and each round syncs it with the new job views. Jobs
that changed (arrived, left, tasks finished) are the only ones recomputed."""

from __future__ import annotations

from heapq import heapify, heappop, heappush, heapreplace   # names, not attributes: hot paths call them
from typing import Callable, Iterable, Sequence

from tcluster.domain.resources import Resources
from tcluster.scheduler.fairshare import Axes, SaturationIndex, share_key
from tcluster.scheduler.fairtree import QueueIndex
from tcluster.scheduler.queues import QueueTree
from tcluster.scheduler.mchfactors import Factors, GlobalEntry, subtree
from tcluster.scheduler.mchpropagate import Propagation
from tcluster.scheduler.mchusers import UserLevel
from tcluster.scheduler.usershare import Held, held_from_views
from tcluster.scheduler.views import JobView


class _Job:
    __slots__ = ("node", "weight", "mu", "normalized", "shares", "running", "pending",
                 "submitted", "active", "version", "view")

    def __init__(self, view: JobView, node: int, axes: Axes, first_version: int) -> None:
        shape = axes.shape(view.demand)
        self.node, self.weight, self.view = node, view.weight, view
        self.mu, self.shares, self.normalized = shape.mu, shape.shares, shape.normalized
        self.running, self.pending, self.submitted = view.running, view.pending, view.submitted_at
        self.active = False
        self.version = first_version

    def entry(self, job_id: str) -> tuple[float, float, str, int, float]:
        """(weighted share rounded for comparing, tie, version, the exact share): the
        global key is computed from the exact share, so rounding never compounds."""
        share = self.running * self.mu / self.weight
        return (share_key(share), self.submitted, job_id, self.version, share)


class MchState(UserLevel, Propagation, Factors):
    """The flattened tree of one queue tree and one cluster capacity, kept current."""

    def __init__(self, queues: QueueTree | None, capacity: Resources) -> None:
        self.axes = Axes.of(capacity)
        self.index = QueueIndex(queues)
        self._user_of = self.index.user_of   # the index's own dict: users it makes later show in it
        self._zero = (0.0,) * len(self.axes.kinds)
        self._sum: list[tuple[float, ...]] = []   # eq. 2's demand, per kind (tuples: read whole, replaced whole)
        self._count: list[int] = []         # active children (jobs and queues)
        self._mu: list[float] = []
        self._norm: list[tuple[float, ...]] = []  # what this queue adds to its parent, per unit weight
        self._factor: list[float] = []      # F: product of mu / weight up to the root
        self._heaps: list[list[tuple[float, float, str, int, float]]] = []
        self._qversion: list[int] = []
        self._filed: list[GlobalEntry | None] = []   # each queue's valid global entry
        self._grow()
        self._below = [subtree(self.index, node) for node in range(len(self.index))]
        self._pre, self._size = [0] * len(self._below), [len(walk) for walk in self._below]
        for place, (node, _, _) in enumerate(self._below[0]):
            self._pre[node] = place
        self._global: list[GlobalEntry] = []
        self._jobs: dict[str, _Job] = {}
        self._lives = 0   # jobs made so far: each life's versions start at lives << 32
        self._stale_factor: set[int] = set()
        self._dirty: set[int] = set()
        self._risen: set[int] = set()       # queues whose global entry is below its exact key (F rose)
        self._held: dict[int, list[float]] = {}   # user node -> what it holds, shares per kind
        self._user_heaps: dict[int, list[tuple[float, float, str, float, int, int]]] = {}   # leaf -> its users

    def _grow(self) -> None:
        for _ in range(len(self.index) - len(self._sum)):
            self._sum.append(self._zero)
            self._count.append(0)
            self._mu.append(0.0)
            self._norm.append(self._zero)
            self._factor.append(1.0)
            self._heaps.append([])
            self._qversion.append(0)
            self._filed.append(None)

    # ---- jobs come, go and change ----

    def sync(self, views: Iterable[JobView], held: Held | None = None) -> None:
        """Brings the state to `views` (jobs with pending tasks) and what users hold,
        touching only changes."""
        views = list(views)
        self._sync_jobs(views)
        self._sync_held(held_from_views(views) if held is None else held)

    def _sync_jobs(self, views: list[JobView]) -> None:
        if not self._jobs:
            self._load(views)
            return
        seen = set()
        for view in views:
            seen.add(view.job_id)
            job = self._jobs.get(view.job_id)
            if job is None or _identity(job.view) != _identity(view):
                self.remove(view.job_id)
                self.add(view)
            else:
                self._update(job, view.running, view.pending)
        for job_id in [j for j in self._jobs if j not in seen]:
            self.remove(job_id)

    def _load(self, views: list[JobView]) -> None:
        """The first flattening in one pass, O(q): children before parents (eq. 2), then
        the factors from the root down, then one heapify per heap."""
        nodes = [self.index.locate_job(v.queue, v.user) for v in views]
        self._grow()
        for view, node in zip(views, nodes):
            job = self._jobs[view.job_id] = self._new_job(view, node)
            if job.pending > 0:
                job.active = True
                job.version += 1
                self._heaps[node].append(job.entry(view.job_id))
                self._count[node] += 1
                self._sum[node] = tuple(a + job.weight * b for a, b in zip(self._sum[node], job.normalized))
        parent, weight = self.index.parent, self.index.weight
        for node in range(len(self.index) - 1, 0, -1):
            heapify(self._heaps[node])
            total = self._sum[node]
            mu = max(max(total), 0.0) if self._count[node] else 0.0
            self._mu[node] = mu
            self._norm[node] = tuple(x / mu for x in total) if mu > 0 else self._zero
            if self._count[node]:
                up = parent[node]
                self._count[up] += 1
                self._sum[up] = tuple(a + weight[node] * b for a, b in zip(self._sum[up], self._norm[node]))
        for node in range(1, len(self.index)):
            above = self._factor[parent[node]] if parent[node] > 0 else 1.0
            self._factor[node] = above * self._mu[node] / weight[node]
            if self._heaps[node]:
                self._dirty.add(node)

    def add(self, view: JobView) -> None:
        node = self.index.locate_job(view.queue, view.user)
        self._grow()
        job = self._jobs[view.job_id] = self._new_job(view, node)
        if job.pending > 0:
            self._activate(view.job_id, job)

    def _new_job(self, view: JobView, node: int) -> _Job:
        """A job's new life starts its versions where no earlier life's reach: an entry a
        job left in its old queue's heap must never pass for the job that came back (under
        another queue or user, `tcl update --queue`), or a finished job could be picked."""
        self._lives += 1
        return _Job(view, node, self.axes, self._lives << 32)

    def remove(self, job_id: str) -> None:
        job = self._jobs.pop(job_id, None)
        if job is not None and job.active:
            self._deactivate(job)

    def block(self, job_id: str) -> None:
        """Blocked jobs drop out of their queues' demands until the next sync."""
        job = self._jobs.get(job_id)
        if job is not None and job.active:
            self._deactivate(job)

    def _update(self, job: _Job, running: int, pending: int) -> None:
        rekey = running != job.running
        job.running, job.pending = running, pending
        if job.active and pending <= 0:
            self._deactivate(job)
        elif not job.active and pending > 0:
            self._activate(job.view.job_id, job)
        elif job.active and rekey:
            job.version += 1
            heappush(self._heaps[job.node], job.entry(job.view.job_id))
            self._dirty.add(job.node)

    def _activate(self, job_id: str, job: _Job) -> None:
        job.active = True
        job.version += 1
        heappush(self._heaps[job.node], job.entry(job_id))
        self._propagate(job.node, [job.weight * x for x in job.normalized], 1)
        self._dirty.add(job.node)

    def _deactivate(self, job: _Job) -> None:
        job.active = False
        job.version += 1       # its heap entry is dropped when it surfaces
        weight, normalized = job.weight, job.normalized
        if len(normalized) == 2:   # as _propagate, without the list
            self._propagate_pair(job.node, -weight * normalized[0], -weight * normalized[1], -1)
        else:
            self._propagate_any(job.node, [-weight * x for x in normalized], -1)
        self._dirty.add(job.node)

    # ---- picking ----

    def pick(self) -> str | None:
        if self._stale_factor or self._dirty:
            self._flush()
        heap, qversion, risen = self._global, self._qversion, self._risen
        while heap:
            entry = heap[0]
            node = entry[3]
            if entry[4] == qversion[node]:
                if not risen or node not in risen:
                    return entry[2]
                self._refresh(node)   # its F rose since it was filed: file the exact key, look again
                continue
            heappop(heap)
        return None

    def placed(self, job_id: str) -> None:
        job = self._jobs[job_id]
        job.running += 1
        job.pending -= 1
        node = job.node
        users = self._user_of   # empty on a tree that shares by no users: one test, not three
        if users:
            held = self._held.get(node)
            if held is not None:   # its user holds more: the user's key changes
                self._held[node] = [a + b for a, b in zip(held, job.shares)]   # re-filed below
        if job.pending <= 0:
            self._ended(job, job_id)
            return
        version = job.version = job.version + 1
        share = job.running * job.mu / job.weight
        entry = (share_key(share), job.submitted, job_id, version, share)   # job.entry, inlined: the hot path
        heap = self._heaps[node]
        if heap and heap[0][2] == job_id:
            heapreplace(heap, entry)
        else:
            heappush(heap, entry)
        if self._stale_factor or self._dirty:
            self._dirty.add(node)
        elif users and (node in users or node in self._user_heaps):
            self._refresh(node)
        else:   # the most common case, a queue without users: _refresh, inlined
            best = heap[0]   # the entry just filed, or another job's, valid unless it is stale
            if best is not entry:
                other = self._jobs.get(best[2])
                if other is None or not other.active or other.version != best[3]:
                    self._refresh(node)   # stale entries on top: _refresh drops them
                    return
            risen = self._risen
            if risen:
                risen.discard(node)
            qversion = self._qversion
            was = qversion[node]
            qversion[node] = was + 1
            share = best[4]   # 0 for a job that runs nothing yet: its key is 0 whatever F is
            filed = self._filed[node] = (share_key(self._factor[node] * share) if share else 0.0, best[1], best[2],
                                         node, was + 1, share)
            glob = self._global
            if glob and glob[0][3] == node and glob[0][4] == was:   # its own entry on top: the usual case
                heapreplace(glob, filed)
            else:
                heappush(glob, filed)

    def _ended(self, job: _Job, job_id: str) -> None:
        """Its last task placed: the job leaves its queue's demand (eq. 2), and its queue
        is re-filed at the next pick, so its filed entry is dropped now: the walk has no
        key of the ended job to re-make."""
        node = job.node
        heap = self._heaps[node]
        if heap and heap[0][2] == job_id:   # its entry, stale now: dropped here, not when it surfaces
            heappop(heap)
        self._filed[node] = None
        self._deactivate(job)

    # ---- reading ----

    def weights(self) -> dict[str, float]:
        """The flattened weight of every active job: its weight / F of its queue."""
        if self._stale_factor or self._dirty:
            self._flush()
        weights = {}
        for job_id, job in self._jobs.items():
            if job.active:
                factor = self._factor_of(job.node)
                weights[job_id] = job.weight / factor if factor > 0 else job.weight
        return weights

    def _factor_of(self, node: int) -> float:
        """F of `node`; a user's from its leaf's, as the walk would make it: the walk skips
        users (no key is made from their F), so theirs is made here, when it is read."""
        if node in self._user_of:
            up = self.index.parent[node]
            return self._factor[up] * self._mu[node] / self.index.weight[node]
        return self._factor[node]

    def root_demand(self) -> list[float]:
        return list(self._sum[0])


def _identity(view: JobView) -> tuple[object, ...]:
    return (view.demand, view.weight, view.queue, view.submitted_at, view.user)


class _MchRound:
    def __init__(self, state: MchState, jobs: Sequence[JobView]) -> None:
        self._state = state
        self._saturation = SaturationIndex([j for j in jobs if j.pending > 0])
        # The state's own methods, bound: one call a decision less (same calls, same picks).
        self.next_job: Callable[[], str | None] = state.pick
        self.placed: Callable[[str], None] = state.placed
        self.skip: Callable[[str], None] = state.block

    def limit(self, largest_free: Resources) -> None:
        for job_id in self._saturation.limit(largest_free):
            self._state.block(job_id)


class MchPolicy:
    """Keeps the flattened tree between rounds; rebuilt when the tree or capacity changes."""

    name = "mch"

    def __init__(self) -> None:
        self._state: MchState | None = None
        self._queues: QueueTree | None = None
        self._capacity: Resources | None = None

    def start_round(self, jobs: Sequence[JobView], capacity: Resources,
                    queues: QueueTree | None = None, held: Held | None = None) -> _MchRound:
        if self._state is None or queues is not self._queues or capacity != self._capacity:
            self._state = MchState(queues, capacity)
            self._queues, self._capacity = queues, capacity
        self._state.sync(jobs, held)
        return _MchRound(self._state, jobs)
