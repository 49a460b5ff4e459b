"""`tcl node cordon|uncordon|drain|maint|forget NODE…` and `tcl node drain --monitor`.

The monitor answers kubectl#172 ("drains that hang silently"): it polls the master's node
list and prints each task the drain still waits for and why, each task that leaves, the
deadline when it passes, and the end (DRAINED). Ctrl-C stops the monitoring, never the drain."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from tcluster.cli.client import MasterClient
from tcluster.cli.commands import JSON_OUTPUT, print_json, reply_node_json
from tcluster.cli.options import EXIT_FAILURE, EXIT_OK
from tcluster.cli.tables import clock_cell, format_age, node_ops_cell
from tcluster.v1 import jobs_pb2

EXIT_INTERRUPTED = 130
MONITOR_INTERVAL_S = 1.0


def node(args: argparse.Namespace, client: MasterClient) -> int:
    request = jobs_pb2.OperateNodesRequest(
        op=args.node_op, nodes=args.nodes, reason=args.reason, deadline_s=getattr(args, "deadline", 0.0),
        start=getattr(args, "start", 0.0), duration_s=getattr(args, "duration", 0.0))
    reply = client.operate_nodes(request)
    if args.output == JSON_OUTPUT:
        print_json([reply_node_json(n, None) for n in reply.nodes])
    else:
        now = time.time()
        for n in reply.nodes:
            print(f"{n.name}: {n.state}" + (f" ({note})" if (note := node_ops_cell(n.ops, now)) else ""))
    sys.stdout.flush()
    if args.node_op == "drain" and getattr(args, "monitor", False):
        say = print if args.output != JSON_OUTPUT else _stderr   # JSON stays parseable on stdout
        return monitor(client, list(dict.fromkeys(args.nodes)), say)
    return EXIT_OK


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class _Seen:
    """What the monitor already said, so that it says each thing once."""
    blockers: dict[str, dict[str, str]] = field(default_factory=dict)   # node -> task -> the kind of why
    deadline_told: set[str] = field(default_factory=set)
    done: dict[str, str] = field(default_factory=dict)                 # node -> its final state


def monitor(client: MasterClient, names: list[str], say: Callable[[str], None] = print,
            sleep: Callable[[float], None] = time.sleep, now: Callable[[], float] = time.time) -> int:
    """Until every node is DRAINED (0), or a drain was cancelled (1); Ctrl-C: 130, the
    drain goes on."""
    seen = _Seen()
    try:
        while True:
            listed = {n.name: n for n in client.list_nodes()}
            for name in names:
                if name not in seen.done:
                    _report(name, listed.get(name), seen, say, now())
            if len(seen.done) == len(names):
                cancelled = [n for n, state in seen.done.items() if state != "DRAINED"]
                return EXIT_FAILURE if cancelled else EXIT_OK
            sys.stdout.flush()
            sleep(MONITOR_INTERVAL_S)
    except KeyboardInterrupt:
        _stderr(f"stopped monitoring; the drain of {', '.join(names)} goes on (`tcl nodes` shows it)")
        return EXIT_INTERRUPTED


def _report(name: str, node: jobs_pb2.Node | None, seen: _Seen, say: Callable[[str], None], now: float) -> None:
    if node is None:
        seen.done[name] = "GONE"
        say(f"{name}: no longer known to the master")
        return
    state = node.ops.state
    if state == "DRAINED":
        seen.done[name] = state
        took = f" after {format_age(node.ops.at - node.ops.drain_since)}" if node.ops.drain_since else ""
        say(f"{name}: DRAINED{took}: no task left")
        return
    if state != "DRAINING":
        seen.done[name] = state
        say(f"{name}: the drain was cancelled: {state} ({node_ops_cell(node.ops, now) or 'by an uncordon'})")
        return
    deadline = node.ops.drain_deadline
    if deadline and now >= deadline and name not in seen.deadline_told:
        seen.deadline_told.add(name)
        say(f"{name}: deadline {clock_cell(deadline, now)} reached: the {len(node.blockers)} task(s) left are "
            "stopped and requeued elsewhere")
    _blockers(name, node, seen, say)


def _blockers(name: str, node: jobs_pb2.Node, seen: _Seen, say: Callable[[str], None]) -> None:
    """A line per task when it first blocks, when why changes in kind (running -> being
    stopped), and when it leaves; the countdown in a why is not a change."""
    before = seen.blockers.setdefault(name, {})
    now_blocking = {}
    for b in node.blockers:
        kind = f"{b.state}:{b.why.split(' (in ')[0].split(';')[0]}"
        now_blocking[b.task_id] = kind
        if before.get(b.task_id) != kind:
            job = f"job {b.job_name} ({b.job_id})" if b.job_name else f"job {b.job_id}"
            say(f"{name}: waiting for task {b.task_id} of {job}, {b.state}: {b.why}")
    for task_id in sorted(set(before) - set(now_blocking)):
        say(f"{name}: task {task_id} left the node")
    seen.blockers[name] = now_blocking


__all__ = ["monitor", "node"]
