"""MCH's factors kept current and the global heap's entries kept exact, a mixin of
MchState: a queue whose mu moved gives the queues below a new F (one walk of a
precomputed preorder), and each queue's one entry in the global heap is re-keyed.

A queue's entry is (round(F x the exact share of its best job, 12), that job's tie, the
job, the queue, the queue's version, that exact share); the queue keeps the entry it
filed. So a new F re-keys it with one product: an unchanged key (a job that runs nothing yet,
or an F that moved by less than the rounding) keeps its entry as it is; a lower key is
re-filed at once (it may come first); a higher one is left as a lower bound of its key
and re-filed only when it reaches the top (pick). Queues whose best job changed are
re-filed after the walk anyway (dirty), and a leaf with users, whose entry is the least
of two keys, is re-filed whenever its F moves. Picks are those of eager re-filing, bit
for bit (tests/unit/test_mch_equivalence.py)."""

from __future__ import annotations

from heapq import heapify, heappop, heappush, heapreplace   # names, not attributes: hot paths call them
from typing import Any, Callable

from tcluster.scheduler.fairshare import share_key
from tcluster.scheduler.fairtree import QueueIndex

# (key, tie, job, queue, queue's version, the exact share the key was made from): entries
# differ before the share, so it is carried, never compared.
GlobalEntry = tuple[float, float, str, int, int, float]


class Factors:
    index: QueueIndex
    _jobs: dict[str, Any]
    _user_of: dict[int, tuple[str, str]]   # the index's own dict of user nodes
    _heaps: list[list[tuple[float, float, str, int, float]]]
    _user_heaps: dict[int, list[tuple[float, float, str, float, int, int]]]
    _mu: list[float]
    _factor: list[float]        # F: product of mu / weight up to the root
    _qversion: list[int]
    _filed: list[GlobalEntry | None]   # the queue's valid entry in the global heap
    _below: list[tuple[tuple[int, int, float], ...]]
    _pre: list[int]             # a queue's place in the preorder of the tree it was built from
    _size: list[int]            # how many places its subtree takes there
    _global: list[GlobalEntry]
    _stale_factor: set[int]
    _dirty: set[int]
    _risen: set[int]

    _refresh_user: Callable[[int], None]                                          # mchusers
    _best_user: Callable[[int], tuple[float, float, str, float, int, int] | None]   # mchusers

    def _flush(self) -> None:
        stale, dirty = self._stale_factor, self._dirty
        if len(stale) == 1:   # one job ended or came since the last pick
            self._recompute_factors(stale.pop())
        elif stale:
            for top in self._tops(stale):
                self._recompute_factors(top)
            stale.clear()
        if dirty:
            for node in dirty:
                self._refresh(node)
            dirty.clear()
        if len(self._global) > 4 * len(self.index) + 64:   # drop the stale entries
            self._global = [e for e in self._global if e[4] == self._qversion[e[3]]]
            heapify(self._global)

    def _tops(self, stale: set[int]) -> list[int]:
        """The stale queues no other stale queue is above. One ended job makes a chain of
        them up its path: the highest, if every other lies in its preorder span."""
        pre, size = self._pre, self._size
        if max(stale) < len(pre):
            top = min(stale, key=pre.__getitem__)   # the first in preorder: an ancestor of the rest, if any is
            first, end = pre[top], pre[top] + size[top]
            if all(first <= pre[node] < end for node in stale):
                return [top]
        return [n for n in stale if not any(up in stale for up in self.index.ancestors(n)[1:])]

    def _recompute_factors(self, top: int) -> None:
        """New F for `top` and every queue below it, parents first, each queue re-keyed as
        the module says. F changes several times between most queues' turns: only a key
        that fell, or the last one before a turn, costs a re-filing. A queue waiting in
        `dirty` may be re-keyed from its old best job here: harmless, as it is re-filed
        before the next pick. Once per ended job: kept to plain code."""
        parent, weight, below = self.index.parent, self.index.weight, self._below
        factor, mus = self._factor, self._mu
        if top in self._user_of:   # no key is made from a user's F: weights() makes it when read
            return
        users, risen, filed, qversion = self._user_heaps, self._risen, self._filed, self._qversion
        # A user's key is F(leaf) x its own share: the leaf's entry carries F(leaf), so
        # users are not walked.
        for node, up, w in below[top] if top < len(below) else ((top, parent[top], weight[top]),):
            new = factor[up] * mus[node] / w   # the root's F is 1.0: 1.0 x mu is mu, bit for bit
            entry = filed[node]
            if entry is None:   # nothing filed (most queues above the leaves): only F
                factor[node] = new
                continue
            share = entry[5]
            if not share and not users:   # a job that runs nothing yet: its key is 0 whatever F is
                factor[node] = new
                continue
            old = factor[node]
            if new == old:
                continue
            factor[node] = new
            if users and node in users:
                self._rekey_with_users(node, new < old)
                continue
            key = share_key(new * share)
            if key > entry[0]:
                risen.add(node)
                continue
            if risen:
                risen.discard(node)   # exact again, or re-filed below
            if key < entry[0]:   # re-filed here, not by _file: a call less for each fallen key
                version = qversion[node] = qversion[node] + 1
                entry = filed[node] = (key, entry[1], entry[2], node, version, share)
                heappush(self._global, entry)

    def _rekey_with_users(self, node: int, fell: bool) -> None:
        """A leaf with users files the least of two keys, which a new F may reorder (or
        tie): it is re-filed now if F fell, else when its entry reaches the top."""
        if fell:
            self._dirty.add(node)
        else:
            self._risen.add(node)

    def _refresh(self, node: int) -> None:
        """Re-files `node`'s best active job in the global heap (a user's: in its leaf's
        heap of users, then the leaf's). Once or twice a decision: kept to plain code."""
        users = self._user_of   # empty on a tree that shares by no users
        if users and node in users:
            self._refresh_user(node)
            node = self.index.parent[node]
        heap, jobs = self._heaps[node], self._jobs
        best = None
        while heap:   # _best_job, inlined
            top = heap[0]
            job = jobs.get(top[2])
            if job is not None and job.active and job.version == top[3]:
                best = top
                break
            heappop(heap)
        if users and node in self._user_heaps:
            self._refresh_with_users(node, best)
        elif best is None:
            self._unfile(node)
        else:
            share = best[4]   # 0 for a job that runs nothing yet: its key is 0 whatever F is
            self._file(node, share_key(self._factor[node] * share) if share else 0.0, best[1], best[2], share)

    def _refresh_with_users(self, node: int, best: tuple[float, float, str, int, float] | None) -> None:
        """A leaf with users files the least of its own best job's key and its best user's."""
        user = self._best_user(node)
        factor = self._factor[node]
        candidates = []   # (key, tie, job, exact share): the job's and the user's
        if best is not None:
            candidates.append((share_key(factor * best[4]), best[1], best[2], best[4]))
        if user is not None:
            candidates.append((share_key(factor * user[3]), user[1], user[2], user[3]))
        if candidates:
            self._file(node, *min(candidates))
        else:
            self._unfile(node)

    def _unfile(self, node: int) -> None:
        """`node` has nothing to run: its entry goes stale, and nothing replaces it."""
        self._risen.discard(node)
        self._qversion[node] += 1
        self._filed[node] = None

    def _file(self, node: int, key: float, tie: float, job_id: str, share: float) -> None:
        """Files `node`'s one valid global entry: `job_id` at `key`, made from `share`."""
        risen = self._risen
        if risen:
            risen.discard(node)
        qversion = self._qversion
        version = qversion[node] = qversion[node] + 1
        entry = self._filed[node] = (key, tie, job_id, node, version, share)
        glob = self._global
        if glob and glob[0][3] == node and glob[0][4] == version - 1:
            heapreplace(glob, entry)
        else:
            heappush(glob, entry)


def subtree(index: QueueIndex, top: int) -> tuple[tuple[int, int, float], ...]:
    """(queue, its parent, its weight) for `top` and every queue below it, parents before
    children (users left out): what a new F walks."""
    order, stack = [], [top]
    while stack:
        node = stack.pop()
        order.append((node, index.parent[node], index.weight[node]))
        stack.extend(reversed(index.subqueues[node]))
    return tuple(order)

