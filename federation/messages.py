"""The federation's values and wire messages (notes/megha.md §1.5, §6.3), all frozen.

Resources are tuples of ints in a fixed order (cores, MB): a node's capacity, its free
room and a task's request alike. Constraints are bit masks: bit c set in a node's
`cmask` says the node satisfies constraint c; a task's `pc` lists the bits it needs.

Every request carries an idempotent `request_id` (task id and attempt) and the LM epoch
the GM last saw: the LM answers a repeated id with its first answer (never launching
twice) and refuses an older epoch. Every answer carries the LM's state (`LMState`),
piggybacked on success and in full on an inconsistency (§IV-B6), so a GM's view of an
LM is refreshed on every exchange, not only by the periodic update."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Union

Res = tuple[int, ...]


def fits(req: Res, free: Res) -> bool:
    """Eq. 6: every dimension of the request within the free room."""
    return all(r <= f for r, f in zip(req, free))


def sub(a: Res, b: Res) -> Res:
    return tuple(x - y for x, y in zip(a, b))


def add(a: Res, b: Res) -> Res:
    return tuple(x + y for x, y in zip(a, b))


def satisfies(cmask: int, pc: int) -> bool:
    """Eq. 5: the node's constraint set contains every constraint the task names."""
    return cmask & pc == pc


@dataclass(frozen=True)
class TaskRequest:
    """M1: a task request `T=(R, PC)` in its user's queue."""
    task_id: str
    queue: str
    req: Res
    pc: int = 0                  # constraint bits the node must have
    duration_s: float = 1.0      # the simulator's run time; a live LM ignores it


@dataclass(frozen=True)
class LMNode:
    """A physical node of an LM: what never changes while the federation runs."""
    cap: Res
    cmask: int


@dataclass(frozen=True)
class LMLayout:
    """What a GM learns once per LM (at subscribe): its nodes and which GM's partition
    each node starts in. The constraint bit-vectors per partition are derived from it."""
    lm: int
    nodes: tuple[LMNode, ...]
    owner: tuple[int, ...]       # node index -> GM index (Eq. 3: one partition per GM)


@dataclass(frozen=True)
class LogicalNode:
    """§IV-B4: room `cap` carved out of physical node `phys` into GM `owner`'s partition
    by a repartition. It holds exactly one task and dissolves when that task ends."""
    phys: int
    cap: Res
    owner: int
    task_id: str


@dataclass(frozen=True)
class TaskOn:
    """A running task as Alg. 2 sees it: whose queue, on which node, holding what."""
    task_id: str
    queue: str
    node: int
    req: Res


@dataclass(frozen=True)
class LMState:
    """An LM's state as one GM may see it: free room per physical node (logical nodes'
    room already taken out), the logical nodes, and running usage per queue (for Alg. 2).
    GMs apply it iff (epoch, version) is newer than what they hold (§6.4 #2)."""
    lm: int
    epoch: int
    version: int
    free: tuple[Res, ...]
    logical: tuple[LogicalNode, ...] = ()
    usage: tuple[tuple[str, Res], ...] = ()
    tasks: tuple[TaskOn, ...] = ()   # oldest first; only from an LM that publishes them (Alg. 2)
    closed: tuple[int, ...] = ()     # node indexes not schedulable now: no victims' room there (issue 35)


@dataclass(frozen=True)
class TaskEnded:
    """A prompt per-GM delta (§6.2): the GM's task ended or was preempted on `node`,
    whose free room at `version` is `node_free`. The periodic full state is the backstop."""
    lm: int
    epoch: int
    version: int
    task_id: str
    node: int
    node_free: Res
    preempted: bool = False


# How an LM names a task stopped by a PreemptAndLaunch (the master's task reason starts
# with it): the victim's GM requeues a task that ended so, also when it finds the end by
# looking up the LM master's job after missing the delta.
PREEMPTED_BY = "preempted by "


def preempted_reason(task_id: str, queue: str) -> str:
    return f"{PREEMPTED_BY}{task_id} of queue {queue}"


# ---- requests: GM -> LM (synchronous) ----

@dataclass(frozen=True)
class InternalLaunch:
    """M2: launch `task` on `node` of the GM's own (internal) partition."""
    request_id: str
    gm: int
    epoch: int
    node: int
    task: TaskRequest


@dataclass(frozen=True)
class RepartitionAndLaunch:
    """M4: move `task.req` of `node`, now in GM `src`'s partition, into a logical node of
    the requesting GM's partition, and launch the task on it."""
    request_id: str
    gm: int
    epoch: int
    src: int
    node: int
    task: TaskRequest


@dataclass(frozen=True)
class PreemptAndLaunch:
    """M6 (Alg. 2): stop `victims` on `node`, then launch `task` there (on a logical node
    when the node is not in the requesting GM's partition)."""
    request_id: str
    gm: int
    epoch: int
    node: int
    victims: tuple[str, ...]
    task: TaskRequest


Request = Union[InternalLaunch, RepartitionAndLaunch, PreemptAndLaunch]


# ---- answers: LM -> GM ----

class InconsistencyKind(Enum):
    """The two inconsistency scenarios of §IV-B6."""
    INTERNAL = "internal"    # the GM's own partition had not the room it believed
    EXTERNAL = "external"    # the room to repartition (or the victims) were gone


class Why(Enum):
    INSUFFICIENT = "insufficient"
    NOT_IN_PARTITION = "not_in_partition"
    VICTIM_GONE = "victim_gone"
    UNKNOWN_NODE = "unknown_node"


@dataclass(frozen=True)
class TaskLaunched:
    """M3/M5/M7 success: the task runs on `node` (logical when `logical`)."""
    request_id: str
    task_id: str
    lm: int
    node: int
    state: LMState
    logical: bool = False
    preempted: tuple[str, ...] = ()


@dataclass(frozen=True)
class Inconsistent:
    """Failure with the LM's current state of all its partitions (§IV-B6)."""
    request_id: str
    task_id: str
    lm: int
    kind: InconsistencyKind
    why: Why
    state: LMState


@dataclass(frozen=True)
class Refused:
    """The request named another LM epoch (a GM that missed a failover): not checked.
    The current state comes along so that the GM adopts the new epoch at once."""
    request_id: str
    task_id: str
    lm: int
    epoch: int
    state: LMState


Answer = Union[TaskLaunched, Inconsistent, Refused]
