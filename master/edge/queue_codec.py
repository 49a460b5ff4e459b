"""The `tcl queues` rows to protobuf: the master is the one side that sends them.

It lives at the master's edge rather than in tcluster/wire.py because its input, a
scheduler QueueRow, is a policy's value, and the ground floor imports no policy."""

from __future__ import annotations

from tcluster.scheduler.queuestats import QueueRow
from tcluster.v1 import jobs_pb2
from tcluster.wire import resources_to_pb


def queue_to_pb(row: QueueRow) -> jobs_pb2.Queue:
    return jobs_pb2.Queue(
        path=row.path, name=row.name, parent=row.parent, depth=row.depth, leaf=row.leaf, weight=row.weight,
        guaranteed_share=row.guaranteed_share, dominant_share=row.dominant_share,
        allocated=resources_to_pb(row.allocated), running_tasks=row.running_tasks,
        pending_tasks=row.pending_tasks, running_jobs=row.running_jobs, pending_jobs=row.pending_jobs,
    )
