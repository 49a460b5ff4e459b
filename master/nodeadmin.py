"""The live master's side of node operations (README, "Node operations"): an admin's
request becomes one core event (master/core/nodeops.py) written before it answers;
placement gets the maintenance windows ahead; `tcl node drain --monitor` and `tcl nodes`
get what each draining node still waits for, and why; /metrics gets the drain requeues.

The decisions themselves are in the core; this reads the state and counts."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from tcluster.domain.errors import InvalidArgument
from tcluster.master.core.events import Cordon, Drain, Forget, KillMode, Maintain, NodeEvent, Step, Uncordon
from tcluster.master.core.feed import AppliedStep
from tcluster.master.core.state import MasterState
from tcluster.domain.model import NodeState, Task, TaskState
from tcluster.domain.nodeorders import DRAIN_REASON_PREFIX
from tcluster.scheduler.windows import Windows, windows_of

OPS = ("cordon", "uncordon", "drain", "maint", "forget")


@dataclass(frozen=True)
class NodeRequest:
    """What `tcl node OP NODE…` asks; times in seconds (start: unix)."""
    op: str
    nodes: tuple[str, ...]
    reason: str = ""
    deadline_s: float = 0.0
    start: float = 0.0
    duration_s: float = 0.0


MAX_REASON_CHARS = 1024
MAX_NODE_NAME_BYTES = 253


def event_of(request: NodeRequest, by: str) -> NodeEvent:
    """The request checked at the edge (sizes: nothing oversized is written), as an event.
    InvalidArgument for an op this master does not know (a newer client's)."""
    if len(request.reason) > MAX_REASON_CHARS:
        raise InvalidArgument("reason", f"is {len(request.reason)} characters; at most {MAX_REASON_CHARS}")
    long = next((n for n in request.nodes if len(n.encode()) > MAX_NODE_NAME_BYTES), None)
    if long is not None:
        raise InvalidArgument("nodes", f"a node name of {len(long.encode())} bytes; at most {MAX_NODE_NAME_BYTES}")
    make: dict[str, Callable[[], NodeEvent]] = {
        "cordon": lambda: Cordon(request.nodes, by, request.reason),
        "uncordon": lambda: Uncordon(request.nodes, by, request.reason),
        "drain": lambda: Drain(request.nodes, by, request.reason, request.deadline_s),
        "maint": lambda: Maintain(request.nodes, by, request.start, request.duration_s, request.reason),
        "forget": lambda: Forget(request.nodes, by, request.reason),
    }
    if request.op not in make:
        raise InvalidArgument("op", f"{request.op[:32]!r} is not one of: {', '.join(OPS)}")
    return make[request.op]()


@dataclass(frozen=True)
class Blocker:
    """A task a drain still waits for."""
    task_id: str
    job_id: str
    job_name: str
    state: str
    why: str


def blockers(state: MasterState, name: str, now: float) -> list[Blocker]:
    """For a DRAINING node: each task holding resources there and what the drain waits for."""
    node = state.nodes.get(name)
    if node is None or node.ops.state is not NodeState.DRAINING:
        return []
    out = []
    for task in state.tasks_on(name):
        if not task.state.holds_resources:
            continue
        job = state.jobs[task.job_id]
        out.append(Blocker(task.id, task.job_id, job.spec.name, task.state.value,
                           _why(state, task, node.ops.deadline, now)))
    return out


def _why(state: MasterState, task: Task, deadline: float, now: float) -> str:
    intent = state.kills.get((task.id, task.attempt))
    if intent is not None and intent.mode is KillMode.REQUEUE:
        return (f"being stopped ({intent.reason}): SIGTERM, then SIGKILL after {state.timeouts.preempt_grace_s:g}s; "
                "requeued on another node when it ends, without using a retry")
    if intent is not None:
        return f"being stopped: {intent.reason}"
    doing = "starting" if task.state is TaskState.STARTING else "running"
    if not deadline:
        return f"{doing}; the drain waits for it to end (no deadline: `tcl node drain --deadline` sets one)"
    left = deadline - now
    when = time.strftime("%H:%M:%S", time.localtime(deadline))
    if left <= 0:
        return f"{doing}; the deadline ({when}) has passed: it is stopped at the next tick"
    return f"{doing}; the drain waits for it to end, or requeues it at the deadline {when} (in {left:.0f}s)"


def windows(state: MasterState, now: float) -> Windows | None:
    """Windows not yet over, of the nodes an operator touched (few): for this round."""
    return windows_of({name: state.nodes[name].ops for name in state.operated if name in state.nodes}, now)


@dataclass
class NodeOpsCounters:
    """For /metrics: since the master started."""
    drain_requeues: int = 0       # attempts a drain's deadline stopped (they requeue)

    def on_step(self, applied: AppliedStep) -> None:
        for intent in applied.step.kills_put.values():
            if intent.mode is KillMode.REQUEUE and intent.reason.startswith(DRAIN_REASON_PREFIX):
                self.drain_requeues += 1


__all__ = ["Blocker", "NodeOpsCounters", "NodeRequest", "OPS", "blockers", "event_of", "windows"]
