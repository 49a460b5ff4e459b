"""The MCH state as it was at 649a338/cea1b70 (O(queues below) per factor change), kept as the
    reference the faster scheduler/mch.py must pick exactly like (tests/unit/test_mch_equivalence.py).

One fix since, made in both: a job's versions restarted at 0 when it came back (removed and
added again, under another queue or user), so an entry its earlier life left in the old
queue's heap could pass for it and a finished job be picked; each life now starts its
versions where no earlier one reaches (`_new_job`)."""

from __future__ import annotations

import heapq
from operator import add
from typing import Iterable, Sequence

from tcluster.domain.resources import Resources
from tcluster.scheduler.fairshare import Axes, SaturationIndex, share_key
from tcluster.scheduler.fairtree import QueueIndex
from tcluster.scheduler.queues import QueueTree
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


class MchState(UserLevel):
    """The flattened tree of one queue tree and one cluster capacity, kept current."""

    def __init__(self, queues: QueueTree | None, capacity: Resources) -> None:
        self.axes = Axes.of(capacity)
        self.index = QueueIndex(queues)
        self._zero = [0.0] * len(self.axes.kinds)
        self._sum: list[list[float]] = []
        self._count: list[int] = []         # active children (jobs and queues)
        self._mu: list[float] = []
        self._norm: list[list[float]] = []  # what this queue adds to its parent, per unit weight
        self._factor: list[float] = []      # F: product of mu / weight up to the root
        self._heaps: list[list[tuple[float, float, str, int, float]]] = []
        self._qversion: list[int] = []
        self._grow()
        self._global: list[tuple[float, float, str, int, int]] = []
        self._jobs: dict[str, _Job] = {}
        self._lives = 0   # jobs made so far: each life's versions start at lives << 32
        self._stale_factor: set[int] = set()
        self._dirty: set[int] = set()
        self._held: dict[int, list[float]] = {}   # user node -> what it holds, shares per kind
        self._user_heaps: dict[int, list[tuple[float, float, str, float, int, int]]] = {}   # leaf -> its users

    def _grow(self) -> None:
        for _ in range(len(self.index) - len(self._sum)):
            self._sum.append(list(self._zero))
            self._count.append(0)
            self._mu.append(0.0)
            self._norm.append(list(self._zero))
            self._factor.append(1.0)
            self._heaps.append([])
            self._qversion.append(0)

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
                self._sum[node] = [a + job.weight * b for a, b in zip(self._sum[node], job.normalized)]
        parent, weight = self.index.parent, self.index.weight
        for node in range(len(self.index) - 1, 0, -1):
            heapq.heapify(self._heaps[node])
            total = self._sum[node]
            mu = max(max(total), 0.0) if self._count[node] else 0.0
            self._mu[node] = mu
            self._norm[node] = [x / mu for x in total] if mu > 0 else list(self._zero)
            if self._count[node]:
                up = parent[node]
                self._count[up] += 1
                self._sum[up] = [a + weight[node] * b for a, b in zip(self._sum[up], self._norm[node])]
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
            heapq.heappush(self._heaps[job.node], job.entry(job.view.job_id))
            self._dirty.add(job.node)

    def _activate(self, job_id: str, job: _Job) -> None:
        job.active = True
        job.version += 1
        heapq.heappush(self._heaps[job.node], job.entry(job_id))
        self._propagate(job.node, [job.weight * x for x in job.normalized], 1)
        self._dirty.add(job.node)

    def _deactivate(self, job: _Job) -> None:
        job.active = False
        job.version += 1       # its heap entry is dropped when it surfaces
        self._propagate(job.node, [-job.weight * x for x in job.normalized], -1)
        self._dirty.add(job.node)

    def _propagate(self, node: int, delta: list[float], count_delta: int) -> None:
        """Adds `delta` to the demand of `node` and carries the change of its normalized
        demand up the path, stopping as soon as nothing changes (eq. 2, incrementally).
        The hot path of every arrival, departure and block: kept to plain loops."""
        if len(delta) == 2:   # cpu and memory: most clusters, unrolled
            self._propagate_pair(node, delta[0], delta[1], count_delta)
        else:
            self._propagate_any(node, delta, count_delta)

    def _propagate_any(self, node: int, delta: list[float], count_delta: int) -> None:
        parent, weight = self.index.parent, self.index.weight
        sums, counts, mus, norms, zero = self._sum, self._count, self._mu, self._norm, self._zero
        while True:
            was_active = counts[node] > 0
            counts[node] += count_delta
            active = counts[node] > 0
            # An idle queue restarts from exact zeros, so rounding never piles up.
            total = list(map(add, sums[node], delta)) if active else list(zero)
            sums[node] = total
            if node == 0:
                return
            mu = max(max(total), 0.0)
            if mu != mus[node]:
                mus[node] = mu
                self._stale_factor.add(node)
            old = norms[node]
            if mu > 0:
                norm = [x / mu for x in total]   # as the fresh flattening divides
            else:
                norm = list(zero)
            norms[node] = norm
            w = weight[node]
            delta = [w * (a - b) for a, b in zip(norm, old)]
            count_delta = 0 if active == was_active else (1 if active else -1)
            if count_delta == 0 and not any(delta):
                return
            node = parent[node]

    def _propagate_pair(self, node: int, d0: float, d1: float, count_delta: int) -> None:
        """_propagate for two kinds, the same float operations in the same order without
        building lists per level: a deactivation walks the whole path, so this is about
        half of what MCH adds to a DRF decision."""
        parent, weight = self.index.parent, self.index.weight
        sums, counts, mus, norms = self._sum, self._count, self._mu, self._norm
        while True:
            was_active = counts[node] > 0
            counts[node] += count_delta
            active = counts[node] > 0
            if active:
                total = sums[node]
                t0, t1 = total[0] + d0, total[1] + d1
            else:
                t0 = t1 = 0.0
            sums[node] = [t0, t1]
            if node == 0:
                return
            mu = t1 if t1 > t0 else t0   # max(max(total), 0.0), as the builtins pick
            if 0.0 > mu:
                mu = 0.0
            if mu != mus[node]:
                mus[node] = mu
                self._stale_factor.add(node)
            o0, o1 = norms[node]
            if mu > 0:
                n0, n1 = t0 / mu, t1 / mu
            else:
                n0 = n1 = 0.0
            norms[node] = [n0, n1]
            w = weight[node]
            d0, d1 = w * (n0 - o0), w * (n1 - o1)
            count_delta = 0 if active == was_active else (1 if active else -1)
            if count_delta == 0 and not (d0 or d1):
                return
            node = parent[node]

    # ---- picking ----

    def pick(self) -> str | None:
        if self._stale_factor or self._dirty:
            self._flush()
        heap, qversion = self._global, self._qversion
        while heap:
            entry = heap[0]
            if entry[4] == qversion[entry[3]]:
                return entry[2]
            heapq.heappop(heap)
        return None

    def placed(self, job_id: str) -> None:
        job = self._jobs[job_id]
        job.running += 1
        job.pending -= 1
        held = self._held.get(job.node)
        if held is not None:   # its user holds more: the user's key changes
            self._held[job.node] = [a + b for a, b in zip(held, job.shares)]   # re-filed below
        if job.pending <= 0:
            self._deactivate(job)
            return
        job.version += 1
        entry = job.entry(job_id)
        heap = self._heaps[job.node]
        if heap and heap[0][2] == job_id:
            heapq.heapreplace(heap, entry)
        else:
            heapq.heappush(heap, entry)
        if self._stale_factor or self._dirty:
            self._dirty.add(job.node)
        else:
            self._refresh(job.node)   # the common case: one queue's best job changed

    def _flush(self) -> None:
        stale, parent = self._stale_factor, self.index.parent
        if len(stale) == 1:   # the common case: one queue's mu changed
            self._recompute_factors(stale.pop())
        elif stale:
            for top in [n for n in stale if not _below_any(n, stale, parent)]:
                self._recompute_factors(top)
            stale.clear()
        for node in self._dirty:
            self._refresh(node)
        self._dirty.clear()
        if len(self._global) > 4 * len(self.index) + 64:   # drop the stale entries
            self._global = [e for e in self._global if e[4] == self._qversion[e[3]]]
            heapq.heapify(self._global)

    def _recompute_factors(self, top: int) -> None:
        parent, weight, subqueues = self.index.parent, self.index.weight, self.index.subqueues
        stack = [top]
        while stack:
            node = stack.pop()
            above = self._factor[parent[node]] if parent[node] > 0 else 1.0
            self._factor[node] = above * self._mu[node] / weight[node]
            if self._heaps[node] or node in self._user_heaps:
                self._dirty.add(node)
            # A user's key is F(leaf) x its own share: the leaf's one global entry carries
            # F(leaf), so a new F never re-files every user of the leaf.
            stack.extend(subqueues[node])

    def _refresh(self, node: int) -> None:
        """Re-files `node`'s best active job in the global heap (a user's: in its leaf's
        heap of users, then the leaf's)."""
        if node in self.index.user_of:
            self._refresh_user(node)
            node = self.index.parent[node]
        best, user = self._best_job(node), self._best_user(node)
        qversion = self._qversion
        version = qversion[node] = qversion[node] + 1
        factor = self._factor[node]
        if best is not None:
            entry = (share_key(factor * best[4]), best[1], best[2], node, version)
            if user is not None:
                entry = min(entry, (share_key(factor * user[3]), user[1], user[2], node, version))
        elif user is not None:
            entry = (share_key(factor * user[3]), user[1], user[2], node, version)
        else:
            return
        glob = self._global
        if glob and glob[0][3] == node and glob[0][4] == version - 1:
            heapq.heapreplace(glob, entry)
        else:
            heapq.heappush(glob, entry)

    # ---- reading ----

    def weights(self) -> dict[str, float]:
        """The flattened weight of every active job: its weight / F of its queue."""
        if self._stale_factor or self._dirty:
            self._flush()
        return {job_id: (job.weight / self._factor[job.node] if self._factor[job.node] > 0 else job.weight)
                for job_id, job in self._jobs.items() if job.active}

    def root_demand(self) -> list[float]:
        return list(self._sum[0])


def _below_any(node: int, nodes: set[int], parent: list[int]) -> bool:
    node = parent[node]
    while node > 0:
        if node in nodes:
            return True
        node = parent[node]
    return False


def _identity(view: JobView) -> tuple[object, ...]:
    return (view.demand, view.weight, view.queue, view.submitted_at, view.user)


