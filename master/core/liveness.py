"""A node's liveness in the state core (issue 26): its stream attaching and leaving, its
reports' proof of life, and the usage interval it is told (the operator's, else from the
cluster's size and the report budget). Split from transitions.py; the same Draft, the same
rules: pure, no I/O."""

from __future__ import annotations

from dataclasses import replace

from tcluster.master.core.draft import Draft
from tcluster.master.core.events import Ack, AgentLeft, Beat, NodeLive
from tcluster.master.core.actions import Registration
from tcluster.wire.features import STREAM_LIVENESS, report_silence_limit, usage_interval
from tcluster.domain.model import NodeState



def usage_interval_of(d: Draft, reg: Registration) -> tuple[float, int]:
    """A stream-liveness agent's usage interval (the operator's, else from the cluster size
    and the budget) and the cluster size; (0, 0) for an older agent: it heartbeats."""
    if STREAM_LIVENESS not in reg.features:
        return 0.0, 0
    t = d.state.timeouts
    nodes = len(d.state.nodes) + (reg.node not in d.state.nodes)
    if reg.usage_interval_s > 0:
        return reg.usage_interval_s, nodes
    return usage_interval(nodes, t.report_budget_per_s, t.heartbeat_interval_s), nodes

def left(d: Draft, ev: AgentLeft) -> None:
    live = d.live(ev.node)
    if live is None or not live.connected:
        return
    # A stream-liveness node was alive as long as its stream: its silence counts from now.
    d.step.live[ev.node] = (replace(live, connected=False, last_seen=d.now.mono, last_seen_wall=d.now.wall)
                            if live.report_limit_s else replace(live, connected=False))
    node = d.state.nodes.get(ev.node)
    if node is not None and node.state is NodeState.READY:
        d.step.nodes[ev.node] = replace(node, state=NodeState.DOWN, last_seen=live.last_seen_wall)

def beat(d: Draft, ev: Beat) -> None:
    live = d.live(ev.node)
    if live is None or not live.connected:
        return
    # Hot (every node, every interval): the constructor, not replace(), and each task
    # looked up once; apply() stores the samples as they are.
    interval = retune(d, live)
    d.step.live[ev.node] = NodeLive(live.connected, d.now.mono, d.now.wall,
                                    report_silence_limit(d.state.timeouts.node_timeout_s, interval) if interval
                                    else 0.0, interval, live.interval_fixed)
    d.step.free[ev.node] = ev.free
    block, kept = ev.usage, []
    for row, (task_id, attempt) in enumerate(zip(block.ids, block.attempts)):
        task = d.state.task(task_id)
        if task is not None and task.node == ev.node and task.attempt == attempt and task.state.holds_resources:
            kept.append(row)
    if kept:      # the block itself when every sample is kept (usually): no copy
        d.step.usage = block if len(kept) == len(block) else block.take(kept)
    # proof of life for the agent's fence; a new usage interval rides on it
    d.step.actions.append(Ack(ev.node, 0, interval if interval != live.usage_interval_s else 0.0))

def retune(d: Draft, live: NodeLive) -> float:
    """A stream-liveness node's usage interval for the cluster's size now: lengthened once
    the cluster grew by more than a quarter, never shortened on a live stream. The master's
    silence limit follows its own value at once, the agent's fence only once the Ack arrives:
    a longer one told over a cut leaves the agent fencing earlier (safe); a shorter one would
    let the master's LOST come before the agent's fence. A shrunk cluster's nodes get the
    shorter interval when they register again."""
    if not live.usage_interval_s or live.interval_fixed:
        return live.usage_interval_s
    t = d.state.timeouts
    want = usage_interval(len(d.state.nodes), t.report_budget_per_s, t.heartbeat_interval_s)
    return want if want > live.usage_interval_s * 1.25 else live.usage_interval_s
