"""`drf`: flat weighted Dominant Resource Fairness over jobs (Ghodsi et al., NSDI 2011).

Each pick goes to the job with the lowest weighted dominant share, running x mu / weight,
where mu is one task's largest share of any resource of the READY cluster. Queues are
ignored: every job is a sibling of every other, which is what `hdrf` and `mch` improve
on, except that in a leaf that shares by users (scheduler/usershare.py) a user is the
sibling, keyed by its dominant share of all it holds there, and its jobs take turns in it. A heap keyed by the weighted share makes each pick O(log p); entries made stale by
a pick are skipped when they surface (lazy deletion)."""

from __future__ import annotations

import heapq
from typing import Any, Sequence

from tcluster.domain.resources import Resources
from tcluster.scheduler.fairshare import Axes, SaturationIndex, share_key
from tcluster.scheduler.queues import QueueTree, default_tree
from tcluster.scheduler.usershare import Held, held_from_views
from tcluster.scheduler.views import JobView


class _User:
    """A user of a leaf that shares by users: one entry in the round's heap, keyed by its
    dominant share of all it holds there; its own jobs in a heap of their own."""
    __slots__ = ("key", "held", "weight", "heap", "version")

    def __init__(self, key: str, held: list[float], weight: float) -> None:
        self.key, self.held, self.weight = key, held, weight
        self.heap: list[tuple[float, float, str, int]] = []
        self.version = 0


class _DrfRound:
    def __init__(self, jobs: Sequence[JobView], capacity: Resources, queues: QueueTree | None,
                 held: Held | None) -> None:
        self._axes = axes = Axes.of(capacity)
        live = [j for j in jobs if j.pending > 0]
        tree = queues or default_tree()
        held = held_from_views(jobs) if held is None else held
        self._users: dict[str, _User] = {}      # "queue/user" -> its state
        # per job: [step = mu / weight, running, pending, version, submitted_at, user or None, shares]
        self._state: dict[str, list[Any]] = {}
        for j in live:
            key = (j.queue, j.user)
            user = None
            if j.user and tree.shares_users(j.queue):
                user = self._users.get(f"{j.queue}/{j.user}")
                if user is None:
                    shares = list(axes.shape(held.get(key, Resources())).shares)
                    name = f"{j.queue}/{j.user}"
                    user = self._users[name] = _User(name, shares, tree.user_weight(*key))
            shape = axes.shape(j.demand)
            self._state[j.job_id] = [shape.mu / j.weight, j.running, j.pending, 0, j.submitted_at, user, shape.shares]
        # (share key, submitted_at, job, "" or the user's name, version): a user's entry
        # names its best job when filed, for the tie-break hdrf and mch use
        self._heap: list[tuple[float, float, str, str, int]] = []
        for job_id, s in self._state.items():
            if s[5] is None:
                self._heap.append((share_key(s[0] * s[1]), s[4], job_id, "", 0))
            else:
                s[5].heap.append((share_key(s[0] * s[1]), s[4], job_id, 0))
        for name, user in self._users.items():
            heapq.heapify(user.heap)
            first = user.heap[0]
            self._heap.append((share_key(max(user.held, default=0.0) / user.weight), first[1], first[2], name, 0))
        heapq.heapify(self._heap)
        self._saturation = SaturationIndex(live)

    def next_job(self) -> str | None:
        heap, state = self._heap, self._state
        while heap:
            _, _, job_id, name, version = heap[0]
            if not name:
                if state[job_id][3] == version:
                    return job_id
            else:
                user = self._users[name]
                if user.version == version:
                    best = _best(user.heap, state)
                    if best is not None:
                        return best
            heapq.heappop(heap)
        return None

    def placed(self, job_id: str) -> None:
        s = self._state[job_id]
        s[1] += 1
        s[2] -= 1
        s[3] += 1
        user: _User | None = s[5]
        if user is None:
            if s[2] > 0:   # else satisfied: its stale entry is dropped when it surfaces
                self._push(self._heap, (share_key(s[0] * s[1]), s[4], job_id, "", s[3]))
            return
        user.held = [a + b for a, b in zip(user.held, s[6])]
        if s[2] > 0:
            self._push(user.heap, (share_key(s[0] * s[1]), s[4], job_id, s[3]))
        best = _best(user.heap, self._state)
        user.version += 1
        if best is not None:
            entry = (share_key(max(user.held, default=0.0) / user.weight), self._state[best][4], best, user.key,
                     user.version)
            self._push(self._heap, entry)

    @staticmethod
    def _push(heap: list[Any], entry: tuple[Any, ...]) -> None:
        if heap and heap[0][2:-1] == entry[2:-1]:   # its own stale entry on top: replace it
            heapq.heapreplace(heap, entry)
        else:
            heapq.heappush(heap, entry)

    def skip(self, job_id: str) -> None:
        if job_id in self._state:
            self._state[job_id][3] += 1   # invalidates its heap entry

    def limit(self, largest_free: Resources) -> None:
        for job_id in self._saturation.limit(largest_free):
            self.skip(job_id)


def _best(heap: list[tuple[float, float, str, int]], state: dict[str, list[Any]]) -> str | None:
    """A user's job to try next, dropping the entries that went stale."""
    while heap:
        job_id, version = heap[0][2], heap[0][3]
        if state[job_id][3] == version:
            return job_id
        heapq.heappop(heap)
    return None


class DrfPolicy:
    name = "drf"

    def start_round(self, jobs: Sequence[JobView], capacity: Resources,
                    queues: QueueTree | None = None, held: Held | None = None) -> _DrfRound:
        return _DrfRound(jobs, capacity, queues, held)
