"""MCH's normalized demands kept current (eq. 2, incrementally), a mixin of MchState: a
job that comes or goes changes its queue's demand, and the change of the queue's
normalized demand is carried up the path. The highest queue on it whose mu changed is
marked stale: its F and those of all the queues below it (the others whose mu changed
among them) are recomputed before the next pick. Every decision
that ends a job or blocks one walks this path, so the two-kind case is written out."""

from __future__ import annotations

from operator import add

from tcluster.scheduler.fairtree import QueueIndex


class Propagation:
    index: QueueIndex
    _zero: tuple[float, ...]
    _sum: list[tuple[float, ...]]
    _count: list[int]          # active children (jobs and queues)
    _mu: list[float]
    _norm: list[tuple[float, ...]]   # what this queue adds to its parent, per unit weight
    _stale_factor: set[int]

    def _propagate(self, node: int, delta: list[float], count_delta: int) -> None:
        """Adds `delta` to the demand of `node` and carries the change of its normalized
        demand up the path, stopping as soon as nothing changes (eq. 2, incrementally)."""
        if len(delta) == 2:   # cpu and memory: most clusters, unrolled
            self._propagate_pair(node, delta[0], delta[1], count_delta)
        else:
            self._propagate_any(node, delta, count_delta)

    def _propagate_any(self, node: int, delta: list[float], count_delta: int) -> None:
        parent, weight = self.index.parent, self.index.weight
        sums, counts, mus, norms, zero = self._sum, self._count, self._mu, self._norm, self._zero
        top = -1
        while True:
            was_active = counts[node] > 0
            counts[node] += count_delta
            active = counts[node] > 0
            # An idle queue restarts from exact zeros, so rounding never piles up.
            total = tuple(map(add, sums[node], delta)) if active else zero
            sums[node] = total
            if node == 0:
                break
            mu = max(max(total), 0.0)
            if mu != mus[node]:
                mus[node] = mu
                top = node
            old = norms[node]
            norm = tuple(x / mu for x in total) if mu > 0 else zero   # as the fresh flattening divides
            norms[node] = norm
            w = weight[node]
            delta = [w * (a - b) for a, b in zip(norm, old)]
            count_delta = 0 if active == was_active else (1 if active else -1)
            if count_delta == 0 and not any(delta):
                break
            node = parent[node]
        if top >= 0:
            self._stale_factor.add(top)

    def _propagate_pair(self, node: int, d0: float, d1: float, count_delta: int) -> None:
        """_propagate for two kinds, the same float operations in the same order, without
        building lists per level: every ended or blocked job walks its path, so this is a
        large part of what MCH adds to a DRF decision. This part walks the queues whose own
        count of active children changes; _propagate_moves the rest of the path."""
        parent, weight = self.index.parent, self.index.weight
        sums, counts, mus, norms = self._sum, self._count, self._mu, self._norm
        top = -1
        while count_delta:
            was_active = counts[node] > 0
            counts[node] += count_delta
            active = counts[node] > 0
            count_delta = 0 if active == was_active else (1 if active else -1)
            if active:
                s0, s1 = sums[node]
                t0 = s0 + d0
                t1 = s1 + d1
            else:   # an idle queue restarts from exact zeros, so rounding never piles up
                t0 = t1 = 0.0
            sums[node] = (t0, t1)
            if node == 0:
                break
            mu = t1 if t1 > t0 else t0   # max(max(total), 0.0), as the builtins pick
            if 0.0 > mu:
                mu = 0.0
            if mu != mus[node]:
                mus[node] = mu
                top = node
            o0, o1 = norms[node]
            n0, n1 = (t0 / mu, t1 / mu) if mu > 0 else (0.0, 0.0)
            norms[node] = (n0, n1)
            w = weight[node]
            d0 = w * (n0 - o0)
            d1 = w * (n1 - o1)
            node = parent[node]
        else:   # a job that asks for nothing still counts: go on while the count moved or demand did
            if d0 or d1:
                top = self._propagate_moves(node, d0, d1, top)
        if top >= 0:   # the highest queue whose mu moved: the walk from it covers the rest
            self._stale_factor.add(top)

    def _propagate_moves(self, node: int, d0: float, d1: float, top: int) -> int:
        """The rest of the path, where every queue stays active (a child that stays active
        keeps its parent active; one that stays idle adds no delta): only demand moves.
        The highest queue whose mu moved, or `top` if none."""
        parent, weight = self.index.parent, self.index.weight
        sums, mus, norms = self._sum, self._mu, self._norm
        while True:
            s0, s1 = sums[node]
            t0 = s0 + d0
            t1 = s1 + d1
            sums[node] = (t0, t1)
            if node == 0:
                return top
            mu = t1 if t1 > t0 else t0
            if 0.0 > mu:
                mu = 0.0
            if mu != mus[node]:
                mus[node] = mu
                top = node
            o0, o1 = norms[node]
            if mu > 0:
                n0 = t0 / mu
                n1 = t1 / mu
            else:
                n0 = n1 = 0.0
            norms[node] = (n0, n1)
            w = weight[node]
            d0 = w * (n0 - o0)
            d1 = w * (n1 - o1)
            if not (d0 or d1):
                return top
            node = parent[node]
