"""The LM wire (federation.proto) into the pure federation values and back, GM side.

Constraint bits: each LM has its own vocabulary (LMLayout.constraints). The GM keeps one
append-only federation-wide vocabulary, so the pure GM sees one `pc` per task; node
masks are translated into it when a layout arrives, and a task's `pc` back into the
LM's bits when a request goes out."""

from __future__ import annotations

from dataclasses import dataclass

from tcluster.federation.messages import (
    Answer, Inconsistent, InconsistencyKind, InternalLaunch, TaskLaunched, LMLayout, LMState, LogicalNode, LMNode, PreemptAndLaunch,
    Refused, RepartitionAndLaunch, Request, Res, TaskEnded, TaskOn, Why,
)
from tcluster.v1 import federation_pb2, jobs_pb2

_KIND = {federation_pb2.INCONSISTENCY_INTERNAL: InconsistencyKind.INTERNAL, federation_pb2.INCONSISTENCY_EXTERNAL: InconsistencyKind.EXTERNAL}
_WHY = {federation_pb2.WHY_INSUFFICIENT: Why.INSUFFICIENT, federation_pb2.WHY_NOT_IN_PARTITION: Why.NOT_IN_PARTITION,
        federation_pb2.WHY_VICTIM_GONE: Why.VICTIM_GONE, federation_pb2.WHY_UNKNOWN_NODE: Why.UNKNOWN_NODE}


def res(msg: federation_pb2.Res) -> Res:
    v = list(msg.v) + [0, 0]
    return (int(v[0]), int(v[1]))


class Vocabulary:
    """constraint "key=value" -> global bit, append-only for the life of the process."""

    def __init__(self) -> None:
        self.bits: dict[str, int] = {}

    def bit(self, word: str) -> int:
        return self.bits.setdefault(word, len(self.bits))

    def mask(self, words: list[str] | tuple[str, ...]) -> int:
        m = 0
        for w in words:
            m |= 1 << self.bit(w)
        return m


@dataclass(frozen=True)
class Layout:
    """One LM epoch's layout: the pure layout (global bits) plus what the wire needs."""
    name: str
    epoch: int
    gms: int
    names: tuple[str, ...]
    words: tuple[str, ...]        # the LM's own vocabulary (its bit order)
    pure: LMLayout

    def local_pc(self, pc: int, vocab: Vocabulary) -> int:
        out = 0
        for c, w in enumerate(self.words):
            if pc >> vocab.bit(w) & 1:
                out |= 1 << c
        return out


def layout_from(msg: federation_pb2.LMLayout, vocab: Vocabulary) -> Layout:
    bits = [vocab.bit(w) for w in msg.constraints]
    nodes = []
    for n in msg.nodes:
        mask = 0
        for c, b in enumerate(bits):
            if n.cmask >> c & 1:
                mask |= 1 << b
        nodes.append(LMNode(res(n.cap), mask))
    pure = LMLayout(lm=msg.lm, nodes=tuple(nodes), owner=tuple(n.owner for n in msg.nodes))
    return Layout(msg.name or f"lm{msg.lm}", msg.epoch, msg.gms, tuple(n.name for n in msg.nodes),
                  tuple(msg.constraints), pure)


def state_from(msg: federation_pb2.LMState) -> LMState:
    return LMState(
        lm=msg.lm, epoch=msg.epoch, version=msg.version, free=tuple(res(f) for f in msg.free),
        logical=tuple(LogicalNode(n.phys, res(n.cap), n.owner, n.task_id) for n in msg.logical),
        usage=tuple((u.queue, res(u.used)) for u in msg.usage),
        tasks=tuple(TaskOn(t.task_id, t.queue, t.node, res(t.req)) for t in msg.tasks),
        closed=tuple(msg.closed))


def ended_from(msg: federation_pb2.FedTaskEnded) -> TaskEnded:
    return TaskEnded(msg.lm, msg.epoch, msg.version, msg.task_id, msg.node, res(msg.node_free), msg.preempted)


def answer_from(msg: federation_pb2.PlaceAnswer) -> tuple[Answer, str]:
    """The pure answer and the LM master's job id (empty unless launched)."""
    state = state_from(msg.state)
    which = msg.WhichOneof("outcome")
    if which == "launched":
        p = msg.launched
        return TaskLaunched(msg.request_id, msg.task_id, msg.lm, p.node, state, p.logical, tuple(p.preempted)), p.job_id
    if which == "inconsistent":
        i = msg.inconsistent
        return Inconsistent(msg.request_id, msg.task_id, msg.lm, _KIND.get(i.kind, InconsistencyKind.INTERNAL),
                            _WHY.get(i.why, Why.INSUFFICIENT), state), ""
    return Refused(msg.request_id, msg.task_id, msg.lm, msg.refused.epoch, state), ""


def request_pb(req: Request, layout: Layout, vocab: Vocabulary, spec: jobs_pb2.JobSpec) -> federation_pb2.PlaceRequest:
    t = req.task
    task = federation_pb2.FedTask(task_id=t.task_id, queue=t.queue, req=federation_pb2.Res(v=list(t.req)),
                                  pc=layout.local_pc(t.pc, vocab), spec=spec)
    out = federation_pb2.PlaceRequest(request_id=req.request_id, gm=req.gm, epoch=req.epoch, node=req.node, task=task)
    if isinstance(req, InternalLaunch):
        out.launch.SetInParent()
    elif isinstance(req, RepartitionAndLaunch):
        out.repartition.src = req.src
    elif isinstance(req, PreemptAndLaunch):
        out.preempt.victims.extend(req.victims)
    return out
