"""MCH's normalized demands kept current (eq. 2, incrementally), a mixin of MchState: a
job that comes or goes changes its queue's demand, and the change of the queue's
normalized demand is carried up the path. A queue whose mu changes is marked stale: its
F and those of the queues below are recomputed before the next pick. Every decision
that ends a job or blocks one walks this path, so the two-kind case is written out."""

from __future__ import annotations

from operator import add

from tcluster.scheduler.fairtree import QueueIndex


class Propagation:
    index: QueueIndex
    _zero: list[float]
    _sum: list[list[float]]
    _count: list[int]          # active children (jobs and queues)
    _mu: list[float]
    _norm: list[list[float]]   # what this queue adds to its parent, per unit weight
    _stale_factor: set[int]

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
        while count_delta:   # the queues whose own count of active children changes
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
        self._propagate_moves(node, d0, d1)

    def _propagate_moves(self, node: int, d0: float, d1: float) -> None:
        """The rest of the path, where every queue stays active (a child that stays active
        keeps its parent active; one that stays idle adds no delta): only sums move. The
        same operations as _propagate_pair, in place, with no counting."""
        parent, weight = self.index.parent, self.index.weight
        sums, mus, norms, stale = self._sum, self._mu, self._norm, self._stale_factor
        while True:
            total = sums[node]
            t0 = total[0] + d0
            t1 = total[1] + d1
            total[0] = t0
            total[1] = t1
            if node == 0:
                return
            mu = t1 if t1 > t0 else t0
            if 0.0 > mu:
                mu = 0.0
            if mu != mus[node]:
                mus[node] = mu
                stale.add(node)
            norm = norms[node]
            o0 = norm[0]
            o1 = norm[1]
            if mu > 0:
                n0 = t0 / mu
                n1 = t1 / mu
            else:
                n0 = n1 = 0.0
            norm[0] = n0
            norm[1] = n1
            w = weight[node]
            d0 = w * (n0 - o0)
            d1 = w * (n1 - o1)
            if not (d0 or d1):
                return
            node = parent[node]
