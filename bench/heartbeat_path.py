"""The master's own code for one heartbeat, part by part, without gRPC (issue 11).

A MasterState holds --nodes nodes with --tasks-per-node RUNNING tasks each; every node's
heartbeat is the bytes a simulated agent sends (testkit.loadgen: free resources and one
usage sample per task). Each round walks all nodes once and times, per heartbeat:

  parse     AgentMessage.FromString (what gRPC's deserializer does before the servicer)
  convert   inbound_from_pb: the domain Heartbeat (usage samples included)
  step      handle(state, Beat): the transition
  apply     MasterState.apply(step)
  ack       outbound_to_pb of the step's Ack (what the stream writes back)

and prints microseconds per heartbeat per part, the total, the share of each, and the
heartbeats one core absorbs in this code alone (gRPC's per-message cost comes on top:
bench/cluster_scale.py measures the whole). Times are this thread's CPU time (a shared,
busy machine stretches wall time); the fastest of --repeat rounds counts.

    .venv/bin/python bench/heartbeat_path.py [--nodes 10000] [--tasks-per-node 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.quick import parse_args as parse_quick  # noqa: E402
from tcluster.master.edge.agent_codec import inbound_from_pb, outbound_to_pb  # noqa: E402
from tcluster.master.core.actions import AckReports, Registration, TaskReport  # noqa: E402
from tcluster.master.core.events import Ack, AgentJoined, Beat, Now, Place, Reports, Submit  # noqa: E402
from tcluster.master.core.state import MasterState, Timeouts  # noqa: E402
from tcluster.master.core.transitions import handle  # noqa: E402
from tcluster.domain.model import JobSpec, TaskState  # noqa: E402
from tcluster.domain.resources import Resources  # noqa: E402
from tcluster.v1 import agent_pb2, common_pb2  # noqa: E402

GiB = 2**30
TIMEOUTS = Timeouts(node_timeout_s=10, lost_timeout_s=20, start_timeout_s=30, job_retention_s=3600,
                    heartbeat_interval_s=1)


def cluster(nodes: int, per_node: int) -> tuple[MasterState, list[bytes]]:
    """Nodes joined, nodes x per_node tasks placed and RUNNING; each node's heartbeat bytes."""
    state = MasterState([], [], [], [], TIMEOUTS, started_mono=0.0)
    now = Now(1000.0, 1.0)

    def do(event: object) -> None:
        state.apply(handle(state, event, now))   # type: ignore[arg-type]
    names = [f"sim-{i:05d}" for i in range(nodes)]
    for name in names:
        do(AgentJoined(Registration(name, Resources(per_node + 0.5, (per_node + 2) * GiB), Resources(), (),
                                    "fake", (), (), 0)))
    total, task_ids = nodes * per_node, []
    for j, start in enumerate(range(0, total, 10_000)):   # at most 10,000 tasks a job
        job_id = f"{j:08x}"
        do(Submit(job_id, JobSpec(("sleep", "inf"), Resources(1, GiB), tasks=min(10_000, total - start))))
        task_ids += [t.id for t in state.tasks[job_id]]
    do(Place(tuple((task_id, names[i // per_node]) for i, task_id in enumerate(task_ids))))
    beats = []
    for n, name in enumerate(names):
        mine = task_ids[n * per_node:(n + 1) * per_node]
        do(Reports(name, tuple(TaskReport(t, 1, TaskState.RUNNING, at=1.0) for t in mine), 1))
        hb = agent_pb2.Heartbeat(sent_at=time.time())
        hb.free.cpu, hb.free.memory = 0.5, 2 * GiB
        hb.usage.extend(common_pb2.TaskUsage(
            task_id=t, attempt=1, cpu_seconds=12.5, cpu_rate=0.8, memory_bytes=int(0.6 * GiB),
            memory_peak_bytes=int(0.7 * GiB), memory_anon_bytes=int(0.5 * GiB), memory_file_bytes=int(0.1 * GiB),
            pids=3, sampled_at=time.time(), cpu_user_seconds=10.0, cpu_system_seconds=2.5, cpu_user_rate=0.7,
            cpu_system_rate=0.1, io_read_bytes=4096, io_write_bytes=8192, rates_derived=True, io_read_rate=40.0,
            io_write_rate=80.0) for t in mine)
        beats.append(agent_pb2.AgentMessage(heartbeat=hb).SerializeToString())
    return state, beats


def one_round(state: MasterState, names: list[str], beats: list[bytes]) -> dict[str, float]:
    """Each part over every node at once, on this thread's CPU clock: a busy machine
    stretches wall time, not the CPU a part uses. Beats of different nodes do not
    interact, so handling all before applying all decides the same steps."""
    clock, n, parts = time.thread_time, len(beats), {}
    t0 = clock()
    messages = [agent_pb2.AgentMessage.FromString(data) for data in beats]
    t1 = clock()
    inbound = [inbound_from_pb(message) for message in messages]
    t2 = clock()
    steps = [handle(state, Beat(name, beat.free, beat.usage), Now(2000.0 + i * 1e-4, 2.0 + i * 1e-4))
             for i, (name, beat) in enumerate(zip(names, inbound))]
    t3 = clock()
    for step in steps:
        state.apply(step)
    t4 = clock()
    for step in steps:
        for action in step.actions:   # as MasterService._send does
            outbound_to_pb(AckReports(action.seq) if isinstance(action, Ack) else action)
    t5 = clock()
    for part, (start, end) in zip(("parse", "convert", "step", "apply", "ack"),
                                  ((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5))):
        parts[part] = (end - start) / n
    return parts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--tasks-per-node", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    args = parse_quick(parser, {"nodes": 100, "repeat": 1})
    state, beats = cluster(args.nodes, args.tasks_per_node)
    names = sorted(state.nodes)
    rounds = [one_round(state, names, beats) for _ in range(args.repeat)]
    best = min(rounds, key=lambda r: sum(r.values()))
    total = sum(best.values())
    print(f"{args.nodes:,} nodes x {args.tasks_per_node} tasks; fastest of {args.repeat} rounds (thread CPU "
          f"time); load average {os.getloadavg()[0]:.2f}")
    print(f"{'part':>8} {'us/heartbeat':>13} {'share':>6}")
    for part, seconds in best.items():
        print(f"{part:>8} {seconds * 1e6:>13.1f} {seconds / total:>6.0%}")
    print(f"{'total':>8} {total * 1e6:>13.1f}   -> {1 / total:,.0f} heartbeats/s per core in this code alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
