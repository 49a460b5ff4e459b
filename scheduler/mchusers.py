"""MCH's user level (scheduler/usershare.py), a mixin of MchState: what each user node
holds, and a heap of each leaf's users under the leaf's one entry in the global heap.

A user's key is F(leaf) x its dominant share of all it holds there, per unit weight (as
`hdrf` compares it), so the leaf's global entry carries F(leaf) and a new F never
re-files every user of the leaf; a user's jobs keep their own order in its own heap."""

from __future__ import annotations

import heapq
from typing import Any

from tcluster.scheduler.fairshare import Axes, share_key
from tcluster.scheduler.fairtree import QueueIndex
from tcluster.scheduler.usershare import Held

JobEntry = tuple[float, float, str, int, float]          # (key, tie, job, version, exact share)
UserEntry = tuple[float, float, str, float, int, int]    # (key, tie, best job, exact share, user node, version)


class UserLevel:
    index: QueueIndex
    axes: Axes
    _zero: tuple[float, ...]
    _heaps: list[list[JobEntry]]
    _jobs: dict[str, Any]
    _qversion: list[int]
    _dirty: set[int]
    _held: dict[int, list[float]]               # user node -> what it holds, shares per kind
    _user_heaps: dict[int, list[UserEntry]]     # leaf -> its users' entries

    def _sync_held(self, held: Held) -> None:
        for node, key in self.index.user_of.items():
            shares = list(self.axes.shape(held[key]).shares) if key in held else list(self._zero)
            if shares != self._held.get(node):
                self._held[node] = shares
                self._dirty.add(node)

    def _best_job(self, node: int) -> tuple[float, float, str, int, float] | None:
        heap, jobs = self._heaps[node], self._jobs
        while heap:
            best = heap[0]
            job = jobs.get(best[2])
            if job is not None and job.active and job.version == best[3]:
                return best
            heapq.heappop(heap)
        return None

    def _refresh_user(self, node: int) -> None:
        """A user's entry in its leaf: its dominant share of all it holds, per unit weight,
        with its best job's tie."""
        best = self._best_job(node)
        version = self._qversion[node] = self._qversion[node] + 1
        if best is None:
            return
        held = max(self._held.get(node, self._zero), default=0.0) / self.index.weight[node]
        heapq.heappush(self._user_heaps.setdefault(self.index.parent[node], []),
                       (share_key(held), best[1], best[2], held, node, version))

    def _best_user(self, leaf: int) -> tuple[float, float, str, float, int, int] | None:
        heap = self._user_heaps.get(leaf)
        while heap:
            if heap[0][5] == self._qversion[heap[0][4]]:
                return heap[0]
            heapq.heappop(heap)
        return None
