"""Where two queues meet in the queue tree, for preemption's rules at every level
(README, "Preemption"): a victim's queue and each of its parents up to, not including,
the lowest parent it shares with the preemptor lose what the victim holds, so each of
them must stay at or above its own target (the victim floor); and the final-share rule
compares the two sides just below that common parent, which are siblings, so their
shares over their guarantees are comparable (HDRF's entitlement; YARN's and Kueue's
hierarchical preemption compare the same way).

Pure: the tree in, paths out."""

from __future__ import annotations

from tcluster.scheduler.queues import QueueTree


class Lineage:
    """Each queue's path up the tree, its own path first, the root left out. A queue not
    in the tree (left over from an older file) is a path of its own."""

    def __init__(self, tree: QueueTree) -> None:
        self.tree = tree
        self._up: dict[str, tuple[str, ...]] = {}
        self._below: dict[tuple[str, str], tuple[str, ...]] = {}   # asked per search: kept all round

    def up(self, queue: str) -> tuple[str, ...]:
        found = self._up.get(queue)
        if found is None:
            path: list[str] = []
            at: str | None = queue
            while at:                                  # "" (the root) and None end it
                path.append(at)
                at = self.tree.parent(at) if self.tree.node(at) is not None else None
            found = self._up[queue] = tuple(path)
        return found

    def below_common(self, victim: str, preemptor: str) -> tuple[str, ...]:
        """The victim's queue and its parents that do not hold the preemptor: those a
        swap takes from (above them the victim's loss is the preemptor's gain)."""
        found = self._below.get((victim, preemptor))
        if found is None:
            mine = set(self.up(preemptor))
            found = self._below[(victim, preemptor)] = tuple(_until(self.up(victim), mine))
        return found

    def sides(self, victim: str, preemptor: str) -> tuple[str, str]:
        """The two siblings just below the common parent: (the victim's, the preemptor's)."""
        theirs = self.below_common(victim, preemptor)
        mine = self.below_common(preemptor, victim)
        return (theirs[-1] if theirs else victim), (mine[-1] if mine else preemptor)

    def depth_in_common(self, victim: str, preemptor: str) -> int:
        """How deep the common parent is (0: the root): a deeper one is a nearer relative."""
        return len(self.up(victim)) - len(self.below_common(victim, preemptor))


def _until(path: tuple[str, ...], stop: set[str]) -> list[str]:
    out = []
    for queue in path:
        if queue in stop:
            break
        out.append(queue)
    return out
