"""What `tcl queues` shows: per queue, its guaranteed share and what it holds now.

Pure: the tree, one usage record per unfinished job and the READY capacity in; rows
out, in pre-order. A job whose queue is not in the tree (the file changed under it)
gets a row of its own below the root, so nothing running is hidden. Under a leaf that
shares by users, each user with work there gets a row (path "leaf/user"), whose
guaranteed share is the leaf's split evenly between them; with decayed usage (a
DecayLedger) every row says its usage."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from tcluster.views.queuerow import QueueRow
from tcluster.domain.resources import Resources
from tcluster.scheduler.decay import DecayLedger
from tcluster.scheduler.queues import QueueNode, QueueTree


@dataclass(frozen=True)
class JobUsage:
    queue: str
    demand: Resources     # one task
    running: int
    pending: int
    user: str = ""


@dataclass
class _Tally:
    allocated: Resources = Resources()
    running_tasks: int = 0
    pending_tasks: int = 0
    running_jobs: int = 0
    pending_jobs: int = 0

    def add(self, job: JobUsage) -> None:
        self.allocated = self.allocated + job.demand.times(job.running)
        self.running_tasks += job.running
        self.pending_tasks += job.pending
        self.running_jobs += job.running > 0
        self.pending_jobs += job.pending > 0


def queue_rows(tree: QueueTree, jobs: Iterable[JobUsage], capacity: Resources,
               ledger: DecayLedger | None = None) -> list[QueueRow]:
    tallies = {node.path: _Tally() for node in tree.walk()}
    orphans: dict[str, _Tally] = {}
    users: dict[str, dict[str, _Tally]] = {}
    for job in jobs:
        if job.user and tree.is_leaf(job.queue) and tree.shares_users(job.queue):
            users.setdefault(job.queue, {}).setdefault(job.user, _Tally()).add(job)
        if tree.node(job.queue) is None:
            orphans.setdefault(job.queue, _Tally()).add(job)
            tallies[""].add(job)
            continue
        path: str | None = job.queue
        while path is not None:   # the job counts for its queue and every queue above
            tallies[path].add(job)
            path = tree.parent(path)
    rows = []
    for node in tree.walk():
        rows.append(_row(tree, node, tallies[node.path], capacity))
        rows += _user_rows(tree, node, users.get(node.path, {}), capacity)
    if ledger is not None:
        rows = [replace(r, decayed_usage_s=ledger.dominant(r.path)) for r in rows]
    for path, tally in sorted(orphans.items()):
        rows.append(QueueRow(path, path, "", 1, True, 1.0, 0.0, tally.allocated.dominant_share(capacity),
                             tally.allocated, tally.running_tasks, tally.pending_tasks,
                             tally.running_jobs, tally.pending_jobs, in_tree=False))
    return rows


def _user_rows(tree: QueueTree, leaf: QueueNode, users: dict[str, _Tally], capacity: Resources) -> list[QueueRow]:
    depth = leaf.path.count(".") + 2
    share = tree.guaranteed_share(leaf.path) / len(users) if users else 0.0
    return [QueueRow(f"{leaf.path}/{user}", user, leaf.path, depth, False, 1.0, share,
                     t.allocated.dominant_share(capacity), t.allocated, t.running_tasks, t.pending_tasks,
                     t.running_jobs, t.pending_jobs, user=user)
            for user, t in sorted(users.items())]


def _row(tree: QueueTree, node: QueueNode, tally: _Tally, capacity: Resources) -> QueueRow:
    depth = node.path.count(".") + 1 if node.path else 0
    return QueueRow(
        node.path, node.name, tree.parent(node.path) or "", depth, node.leaf and bool(node.path), node.weight,
        tree.guaranteed_share(node.path), tally.allocated.dominant_share(capacity), tally.allocated,
        tally.running_tasks, tally.pending_tasks, tally.running_jobs, tally.pending_jobs,
    )
