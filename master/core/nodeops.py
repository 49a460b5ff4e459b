"""Node operations in the master's transitions (README, "Node operations"): an admin's
Cordon, Uncordon, Drain and Maintain events, and what the tick does about them (a drain
that has no task left is DRAINED; one past its deadline requeues what still runs through
the preemption path; a maintenance window opens and closes).

The operator state lives in Node.ops (tcluster/domain/nodeorders.py) and changes only here, in
rows of the step like any node row: a cordon survives agent and master restarts because
registrations copy it (transitions._joined) and the store keeps it."""

from __future__ import annotations

from dataclasses import replace
from tcluster.domain.errors import InvalidArgument, NotFound
from tcluster.master.core.draft import Draft
from tcluster.master.core.events import Cordon, Drain, KillMode, Maintain, Uncordon
from tcluster.master.core.stopping import want_killed
from tcluster.domain.model import Node, NodeState, Task
from tcluster.domain.nodeorders import DRAIN_REASON_PREFIX, READY_OPS, NodeOps
MAX_NODES_PER_EVENT = 10_000


def node_of(d: Draft, name: str) -> Node | None:
    """The node as this step has it so far."""
    return d.step.nodes.get(name) or d.state.nodes.get(name)


def named(d: Draft, names: tuple[str, ...]) -> list[Node]:
    """Every named node, or the whole event is refused: an operator's `tcl node drain a b`
    either takes effect on both or on neither."""
    if not names:
        raise InvalidArgument("nodes", "name at least one node")
    if len(names) > MAX_NODES_PER_EVENT:
        raise InvalidArgument("nodes", f"{len(names)} nodes in one call; at most {MAX_NODES_PER_EVENT}")
    missing = [n for n in names if node_of(d, n) is None]
    if missing:
        raise NotFound(f"no such node: {', '.join(repr(n[:64]) for n in missing[:5])}"
                       f"{' …' if len(missing) > 5 else ''} (`tcl nodes` lists them)")
    found = [node_of(d, n) for n in dict.fromkeys(names)]
    return [n for n in found if n is not None]


def _set(d: Draft, node: Node, ops: NodeOps) -> None:
    if ops != node.ops:
        d.step.nodes[node.name] = replace(node, ops=ops)


def blocking(d: Draft, name: str) -> list[Task]:
    """The tasks a drain of this node waits for: those holding resources there."""
    out = []
    for stored in d.state.tasks_on(name):
        task = d.task(stored.id)
        if task is not None and task.node == name and task.state.holds_resources:
            out.append(task)
    return out


def cordon(d: Draft, ev: Cordon) -> None:
    for node in named(d, ev.nodes):
        # Already CORDONED: the first cordon's who and when stand. DRAINING or DRAINED take
        # no new tasks either, and a cordon must not cancel a drain.
        if node.ops.state in (NodeState.READY, NodeState.MAINT):
            _set(d, node, replace(node.ops, state=NodeState.CORDONED, by=ev.by, at=d.now.wall, reason=ev.reason,
                                  deadline=0.0, since=0.0))


def uncordon(d: Draft, ev: Uncordon) -> None:
    """READY again: a cordon lifted, a drain cancelled (what it already stopped stays
    requeued), the maintenance window dropped. Who did it is kept."""
    for node in named(d, ev.nodes):
        if node.ops.state is not NodeState.READY or node.ops.has_window:
            _set(d, node, replace(READY_OPS, by=ev.by, at=d.now.wall, reason=ev.reason))


def drain(d: Draft, ev: Drain) -> None:
    if not 0 <= ev.deadline_s < float("inf"):
        raise InvalidArgument("deadline", f"{ev.deadline_s!r} must be seconds >= 0 (0: no deadline)")
    deadline = d.now.wall + ev.deadline_s if ev.deadline_s > 0 else 0.0
    for node in named(d, ev.nodes):
        ops = node.ops
        if ops.state is NodeState.DRAINED:
            continue                    # nothing left to wait for
        since = ops.since if ops.state is NodeState.DRAINING else d.now.wall
        # Draining again sets a new deadline and reason (Nomad's `-deadline` on a drain in progress).
        ops = replace(ops, state=NodeState.DRAINING, by=ev.by, at=d.now.wall, reason=ev.reason,
                      deadline=deadline, since=since)
        _set(d, node, _drained_if_empty(d, node.name, ops))


def maintain(d: Draft, ev: Maintain) -> None:
    if not 0 < ev.duration_s < float("inf"):
        raise InvalidArgument("duration", f"{ev.duration_s!r} must be seconds > 0")
    if not 0 <= ev.start < float("inf"):
        raise InvalidArgument("start", f"{ev.start!r} is not a time (unix seconds)")
    end = ev.start + ev.duration_s
    if end <= d.now.wall:
        raise InvalidArgument("start", "the window is already over; give a start in the future (or now)")
    for node in named(d, ev.nodes):
        ops = replace(node.ops, maint_start=ev.start, maint_end=end, maint_by=ev.by, maint_reason=ev.reason)
        _set(d, node, _window(ops, d.now.wall))


def tick(d: Draft) -> None:
    """Only the nodes an operator touched (MasterState.operated): O(those), not O(nodes)."""
    for name in sorted(d.state.operated):
        node = node_of(d, name)
        if node is None:
            continue
        ops = _window(node.ops, d.now.wall)
        if ops.state is NodeState.DRAINING:
            ops = _drained_if_empty(d, name, ops)
            if ops.state is NodeState.DRAINING and ops.deadline and d.now.wall >= ops.deadline:
                _requeue_the_rest(d, name, ops)
        _set(d, node, ops)


def _drained_if_empty(d: Draft, name: str, ops: NodeOps) -> NodeOps:
    if blocking(d, name):
        return ops
    return replace(ops, state=NodeState.DRAINED, at=d.now.wall)


def deadline_reason(name: str, ops: NodeOps) -> str:
    why = f" ({ops.reason})" if ops.reason else ""
    return f"{DRAIN_REASON_PREFIX}node {name}{why} reached its deadline"


def _requeue_the_rest(d: Draft, name: str, ops: NodeOps) -> None:
    """The deadline won: each task still here takes the preemption path (SIGTERM, the
    grace, SIGKILL; its end requeues it without using a retry, a gang whole, or cancels
    its job if it asked --on-preempt cancel). Once per attempt: an intent already
    written stands."""
    reason = deadline_reason(name, ops)
    for task in blocking(d, name):
        if d.intent(task.id, task.attempt) is None:
            want_killed(d, task, reason, KillMode.REQUEUE)


def _window(ops: NodeOps, now: float) -> NodeOps:
    """A window that opened makes a READY node MAINT; one that closed is dropped, and a
    MAINT node is READY again (a cordon or drain asked meanwhile stands)."""
    if ops.has_window and now >= ops.maint_end:
        closed = ops.without_window()
        if ops.state is NodeState.MAINT:
            closed = replace(closed, state=NodeState.READY, at=now, reason="maintenance window ended")
        return closed
    if ops.in_window(now) and ops.state is NodeState.READY:
        return replace(ops, state=NodeState.MAINT, by=ops.maint_by, at=now, reason=ops.maint_reason)
    return ops


__all__ = ["blocking", "cordon", "deadline_reason", "drain", "maintain", "named", "node_of", "tick", "uncordon"]
