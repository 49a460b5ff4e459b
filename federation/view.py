"""Partitions and a GM's (stale) view of one LM, and Alg. 1's match.

The initial layout splits each LM's nodes equally among the GMs, interleaved (node i to
GM i mod M), so that each partition gets a similar mix of constraints; the paper does
not say how (notes §1.2, a [C] choice). Ownership of physical nodes never changes here:
a repartition carves a logical node out of one (§IV-B4) and only moves room.

Per partition the view keeps one bit-vector per constraint, bit i set iff the
partition's i-th node satisfies it (§IV-B1), as Python ints: Alg. 1 ANDs the task's
vectors word-wise, then walks the set bits in index order (first fit)."""

from __future__ import annotations

from dataclasses import dataclass

from tcluster.federation.messages import LMLayout, LMState, LMNode, Res, TaskEnded, fits


def split(lm: int, nodes: tuple[LMNode, ...], n_gms: int) -> LMLayout:
    """Eq. 3: one partition per GM, an equal, interleaved node-count split."""
    return LMLayout(lm=lm, nodes=nodes, owner=tuple(i % n_gms for i in range(len(nodes))))


@dataclass(frozen=True)
class Partition:
    """GM `owner`'s partition of one LM: its node indexes (into the LM) and, for each
    constraint c, the bit-vector of which of those nodes satisfy c."""
    owner: int
    nodes: tuple[int, ...]
    bitvec: tuple[int, ...]

    @classmethod
    def of(cls, layout: LMLayout, owner: int, n_constraints: int) -> Partition:
        nodes = tuple(i for i, o in enumerate(layout.owner) if o == owner)
        vecs = []
        for c in range(n_constraints):
            bits = 0
            for k, i in enumerate(nodes):
                if layout.nodes[i].cmask >> c & 1:
                    bits |= 1 << k
            vecs.append(bits)
        return cls(owner, nodes, tuple(vecs))

    def candidates(self, pc: int) -> int:
        """The AND of the task's constraint vectors over an all-ones start (Alg. 1)."""
        cand = (1 << len(self.nodes)) - 1
        c = 0
        while pc:
            if pc & 1:
                # A constraint no node of this LM knows of: nothing here satisfies it.
                cand &= self.bitvec[c] if c < len(self.bitvec) else 0
            pc >>= 1
            c += 1
        return cand


def match_task(part: Partition, free: list[Res], req: Res, pc: int) -> int:
    """Alg. 1: the first node (in partition order) satisfying the task's constraints with
    room for its request, as an LM node index; -1 when none."""
    cand = part.candidates(pc)
    while cand:
        low = cand & -cand
        node = part.nodes[low.bit_length() - 1]
        if fits(req, free[node]):
            return node
        cand ^= low
    return -1


def constraint_count(layouts: list[LMLayout]) -> int:
    """How many constraint vectors a partition needs: one past the highest bit in use."""
    top = 0
    for layout in layouts:
        for n in layout.nodes:
            top |= n.cmask
    return top.bit_length()


class LMView:
    """A GM's copy of one LM: partitions (fixed) and free room per node (stale). A full
    state applies only when newer by (epoch, version) than the last full one, so a
    reordered update cannot roll back what a later answer already told (notes §6.4 #2).
    A delta is newer news about one node only: it is kept per node, and a later full
    state overrides it only if that state is newer still (a delta must not make an
    older full state of all the other nodes look current)."""

    def __init__(self, layout: LMLayout, n_gms: int, n_constraints: int) -> None:
        self.layout = layout
        self.parts = tuple(Partition.of(layout, g, n_constraints) for g in range(n_gms))
        self.free: list[Res] = [n.cap for n in layout.nodes]
        self.epoch = 0
        self.version = -1
        self.state: LMState | None = None    # the last full state (usage and tasks, for Alg. 2)
        self.node_news: dict[int, tuple[int, int]] = {}   # node -> (epoch, version) of a newer delta

    def newer(self, epoch: int, version: int) -> bool:
        return (epoch, version) > (self.epoch, self.version)

    def apply(self, state: LMState) -> bool:
        if not self.newer(state.epoch, state.version):
            return False
        stamp = (state.epoch, state.version)
        kept = {n: v for n, v in self.node_news.items() if v > stamp}
        self.free = [self.free[i] if i in kept else f for i, f in enumerate(state.free)]
        self.node_news = kept
        self.epoch, self.version = stamp
        self.state = state
        return True

    def apply_delta(self, delta: TaskEnded) -> bool:
        stamp = (delta.epoch, delta.version)
        if stamp <= (self.epoch, self.version) or stamp <= self.node_news.get(delta.node, (0, -1)):
            return False
        self.free[delta.node] = delta.node_free
        self.node_news[delta.node] = stamp
        return True

    def match(self, owner: int, req: Res, pc: int) -> int:
        """Alg. 1 over GM `owner`'s partition of this LM, on this view's free room."""
        return match_task(self.parts[owner], self.free, req, pc)

    def debit(self, node: int, req: Res) -> None:
        """Taken at send time so that the GM's next decision does not count the same room
        twice; the answer's state replaces it either way."""
        self.free[node] = tuple(f - r for f, r in zip(self.free[node], req))
