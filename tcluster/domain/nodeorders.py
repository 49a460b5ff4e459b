"""What an operator asked of a node (README, "Node operations"): cordon, drain, a
maintenance window; each with who, when and why, as Slurm records them. A ground-floor
value: the master's core changes it (master/core/nodeops.py), the stores persist it as one
JSON record, placement reads its window, and `tcl nodes` shows it.

A node's liveness (READY/DOWN, from its agent's stream) is kept apart in Node.state: an
agent that restarts, or a master that restarts, never lifts a cordon or a drain."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from tcluster.domain.states import NodeState

# The operator states; READY here means "nothing asked".
OPERATOR_STATES = (NodeState.READY, NodeState.CORDONED, NodeState.DRAINING, NodeState.DRAINED, NodeState.MAINT)
DRAIN_REASON_PREFIX = "drained: "     # a drain's requeue reasons start so (the /metrics counter tells them apart)


@dataclass(frozen=True)
class NodeOps:
    state: NodeState = NodeState.READY   # one of OPERATOR_STATES
    by: str = ""                         # who asked for the state (a user name)
    at: float = 0.0                      # when the node entered it (unix seconds)
    reason: str = ""
    deadline: float = 0.0                # DRAINING: when what still runs is requeued; 0: none
    since: float = 0.0                   # DRAINING/DRAINED: when the drain began (the drain duration)
    maint_start: float = 0.0             # a maintenance window [start, end); end 0: none
    maint_end: float = 0.0
    maint_by: str = ""
    maint_reason: str = ""

    @property
    def schedulable(self) -> bool:
        """Whether placement may start tasks here at all (a future window is per job: blocks())."""
        return self.state is NodeState.READY

    @property
    def has_window(self) -> bool:
        return self.maint_end > 0

    def in_window(self, now: float) -> bool:
        return self.has_window and self.maint_start <= now < self.maint_end

    def without_window(self) -> NodeOps:
        return replace(self, maint_start=0.0, maint_end=0.0, maint_by="", maint_reason="")


READY_OPS = NodeOps()


def blocks(ops: NodeOps, now: float, time_limit_s: float) -> bool:
    """Whether the node's maintenance window keeps a task with this time limit from
    starting now: it would still run when the window opens. Without a time limit (0) a
    task may run for ever, so any window not yet over blocks it (Slurm's MAINT rule)."""
    if not ops.has_window or ops.maint_end <= now:
        return False
    if time_limit_s <= 0:
        return True
    return now + time_limit_s > ops.maint_start


def shown_state(liveness: NodeState, ops: NodeOps, connected: bool) -> NodeState:
    """The one state `tcl nodes` shows: DOWN when the agent is away (its operator state is
    shown beside it), else the operator's state (READY when nothing was asked)."""
    if not connected or liveness is NodeState.DOWN:
        return NodeState.DOWN
    return ops.state


def ops_to_json(ops: NodeOps) -> str:
    """"" for a node nothing was asked of (most rows); else the fields that are set."""
    if ops == READY_OPS:
        return ""
    data = {k: v for k, v in asdict(ops).items() if v != getattr(READY_OPS, k)}
    data["state"] = ops.state.value
    return json.dumps(data, separators=(",", ":"))


def ops_from_json(text: str) -> NodeOps:
    """Unknown keys (a newer master's) are ignored; an unknown state reads as CORDONED,
    the safe side: a node no one understands takes no new tasks."""
    if not text:
        return READY_OPS
    data: dict[str, Any] = json.loads(text)
    known = {f.name for f in fields(NodeOps)}
    values = {k: v for k, v in data.items() if k in known and k != "state"}
    try:
        state = NodeState(data.get("state", "READY"))
    except ValueError:
        state = NodeState.CORDONED
    if state not in OPERATOR_STATES:
        state = NodeState.CORDONED
    return NodeOps(state=state, **values)


__all__ = ["DRAIN_REASON_PREFIX", "NodeOps", "OPERATOR_STATES", "READY_OPS", "blocks", "ops_from_json",
           "ops_to_json", "shown_state"]
