"""Megha's Local Manager over a live master (issue 25, notes/megha.md §6): the layout a GM
sees, the master's real free room per node index, and which running federated tasks are
whose, rebuilt from the master's own jobs. Sans-IO: the check table itself is
tcluster.federation.lm's LocalManager, given the master's room (master/features/federation_live.py
does the I/O).

Wire conventions: resources are [millicores, memory MiB]; a node's index is its position
in the layout (the master's nodes in name order), fixed for one epoch; the epoch grows
when this master starts leading and whenever its node set changes; the constraint
vocabulary is every node label as "key=value", sorted, at most 64 (bit c of a cmask)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from tcluster.federation.lm import LocalManager
from tcluster.federation.messages import LMLayout, LMNode, Res, TaskRequest, sub
from tcluster.federation.view import split
from tcluster.master.core.pinning import FED_GM, FED_QUEUE, FED_TASK, PIN_NODE, label, pinned_node
from tcluster.domain.model import Job, Node, Task
from tcluster.domain.resources import Resources

MIB = 2**20
MAX_CONSTRAINTS = 64
NO_ROOM: Res = (0, 0)


def res_of(r: Resources) -> Res:
    return (int(round(r.cpu * 1000)), int(r.memory // MIB))


def resources_of(res: Res) -> Resources:
    return Resources(cpu=res[0] / 1000, memory=res[1] * MIB)


def vocabulary(nodes: Iterable[Node]) -> tuple[str, ...]:
    """Every node label as key=value, sorted; the first 64 (a cmask is 64 bits)."""
    return tuple(sorted({f"{k}={v}" for n in nodes for k, v in n.labels}))[:MAX_CONSTRAINTS]


@dataclass(frozen=True)
class LiveLayout:
    """One epoch's layout: the pure LMLayout plus what only the wire needs."""
    layout: LMLayout
    name: str
    gms: int
    epoch: int
    names: tuple[str, ...]
    constraints: tuple[str, ...]

    def index(self, node: str) -> int:
        return self.names.index(node) if node in self.names else -1


def epoch_floor(now_s: float, lease_ttl_s: int | None = None) -> int:
    """The least epoch a master may publish now: milliseconds of wall time, so a restarted
    master or a new leader starts above every epoch an earlier one published. A new leader
    on etcd (`lease_ttl_s`) starts one lease further: the old leader published until its own
    lease deadline by its own clock, so the new epoch stays above its epochs (and a Place
    computed on the old leader's layout is refused StaleEpoch) while the masters' clocks
    differ by less than the lease."""
    return int(now_s * 1000) + (lease_ttl_s * 1000 if lease_ttl_s else 0)


def build_layout(lm: int, name: str, gms: int, epoch: int, nodes: Iterable[Node]) -> LiveLayout:
    ordered = sorted(nodes, key=lambda n: n.name)
    words = vocabulary(ordered)
    bit = {w: c for c, w in enumerate(words)}
    specs = tuple(LMNode(res_of(n.capacity), sum(1 << bit[f"{k}={v}"] for k, v in n.labels if f"{k}={v}" in bit))
                  for n in ordered)
    return LiveLayout(split(lm, specs, gms), name, gms, epoch, tuple(n.name for n in ordered), words)


def mask_of(constraints: Iterable[str], words: tuple[str, ...]) -> int | None:
    """A federated spec's "key=value" constraints as bits; None when one is absent from the
    vocabulary (no node of this LM satisfies it)."""
    bits = 0
    for c in constraints:
        if c not in words:
            return None
        bits |= 1 << words.index(c)
    return bits


@dataclass(frozen=True)
class FedRun:
    """A federated task this master runs (or holds room for: waiting on its pinned node)."""
    task: TaskRequest
    gm: int
    node: str
    job_id: str
    waiting: bool


def federated_run(job: Job, tasks: list[Task]) -> FedRun | None:
    """The federated task of a job that still holds (or waits for) its node; None otherwise."""
    node = pinned_node(job.spec)
    task_id, gm = label(job.spec, FED_TASK), label(job.spec, FED_GM)
    if not node or not task_id or not gm.isdigit() or job.finished_at or not tasks:
        return None
    task = tasks[0]
    if task.state.terminal:
        return None
    spec = TaskRequest(task_id, label(job.spec, FED_QUEUE) or job.spec.queue, res_of(job.spec.resources))
    return FedRun(spec, int(gm), node, job.id, waiting=not task.state.holds_resources)


def fed_labels(gm: int, task_id: str, queue: str, node: str) -> tuple[tuple[str, str], ...]:
    return ((FED_GM, str(gm)), (FED_QUEUE, queue), (FED_TASK, task_id), (PIN_NODE, node))


class FederationLM:
    """The LocalManager of the current epoch over the master's nodes. `room(name)` is the
    master's real free room of a node (nothing for one that takes no tasks now). States
    list the running federated tasks (GMs pick Alg. 2's victims from them): no more work
    than the free room per node that every state carries anyway."""

    def __init__(self, lm: int, name: str, gms: int, room: Callable[[str], Res], epoch: int,
                 schedulable: Callable[[str], bool] = lambda node: True) -> None:
        self.lm, self.name, self.gms = lm, name, gms
        self._room = room
        self._schedulable = schedulable
        # node -> {task id: room} promised to federated tasks not started there yet
        self.waiting: dict[str, dict[str, Res]] = {}
        self.live = build_layout(lm, name, gms, epoch, ())
        self.check = LocalManager(self.live.layout, epoch, publish_tasks=True, room=self.room_at,
                                  schedulable=self.schedulable_at)

    def room_at(self, index: int) -> Res:
        node = self.live.names[index]
        room = self._room(node)
        for req in self.waiting.get(node, {}).values():
            room = sub(room, req)
        return tuple(max(0, x) for x in room)

    def schedulable_at(self, index: int) -> bool:
        return self._schedulable(self.live.names[index])

    def set_waiting(self, node: str, task_id: str, req: Res | None) -> None:
        """A federated task waits for its node (req), or no longer does (None)."""
        if req is not None:
            self.waiting.setdefault(node, {})[task_id] = req
        elif task_id in self.waiting.get(node, {}):
            del self.waiting[node][task_id]
            if not self.waiting[node]:
                del self.waiting[node]

    def sync(self, nodes: Mapping[str, Node], runs: Callable[[], Iterable[FedRun]], epoch_floor: int,
             force: bool = False) -> bool:
        """A new epoch (True) when the node set is not the layout's: the layout is rebuilt,
        the answers kept (a repeat still gets its first answer), the running tasks adopted
        with logical nodes derived (a task on a node outside its GM's partition)."""
        if not force and tuple(sorted(nodes)) == self.live.names:
            return False
        epoch = max(self.live.epoch + 1, epoch_floor)
        answers = self.check.answers
        self.live = build_layout(self.lm, self.name, self.gms, epoch, nodes.values())
        self.check = LocalManager(self.live.layout, epoch, publish_tasks=True, room=self.room_at,
                                  schedulable=self.schedulable_at)
        self.check.answers = answers
        self.adopt(runs())
        return True

    def adopt(self, runs: Iterable[FedRun]) -> None:
        self.waiting = {}
        for run in runs:
            index = self.live.index(run.node)
            if index < 0 or run.task.task_id in self.check.running:
                continue
            owner = self.live.layout.owner[index]
            self.check.adopt(run.task, run.gm, index, logical=owner != run.gm)
            if run.waiting:
                self.set_waiting(run.node, run.task.task_id, run.task.req)
