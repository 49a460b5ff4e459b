"""`tcl queues`: the queue tree with weights, guaranteed shares and what each queue
holds now; under a leaf that shares by users, a row per user (@name); USAGE is the
decayed usage with --usage-half-life. The JSON form carries the same numbers; its field names are an interface."""

from __future__ import annotations

import argparse
import json

from tcluster.cli.client import MasterClient
from tcluster.cli.options import EXIT_OK
from tcluster.domain.units import format_duration
from tcluster.views.formats import format_table
from tcluster.views.render import JsonDict, queues_json
from tcluster.v1 import jobs_pb2
from tcluster.wire.protobuf import queue_from_pb, resources_from_pb


def queues_table(reply: jobs_pb2.ListQueuesResponse) -> str:
    head = (f"fairness: {reply.fairness}   queues: {reply.source}   "
            f"capacity (READY nodes): {resources_from_pb(reply.capacity).describe()}")
    rows = [
        ("  " * (q.depth - 1) + (f"@{q.user}" if q.user else q.name or q.path), f"{q.weight:g}",
         f"{q.guaranteed_share:.3f}", f"{q.dominant_share:.3f}", _usage(q.decayed_usage_s),
         f"{q.running_tasks} ({q.running_jobs})", f"{q.pending_tasks} ({q.pending_jobs})")
        for q in reply.queues if q.path
    ]
    return head + "\n\n" + format_table(("QUEUE", "WEIGHT", "GUARANTEED", "SHARE", "USAGE", "RUNNING", "PENDING"),
                                         rows)


def _usage(share_seconds: float) -> str:
    """Decayed usage as whole-cluster time (3600 share-seconds: the cluster for an hour)."""
    return format_duration(round(share_seconds)) if share_seconds >= 0.5 else "-"


def queues(args: argparse.Namespace, client: MasterClient) -> int:
    reply = client.list_queues()
    print(json.dumps(reply_queues_json(reply), indent=2) if args.output == "json" else queues_table(reply))
    return EXIT_OK


def reply_queues_json(reply: jobs_pb2.ListQueuesResponse) -> JsonDict:
    """The reply's rows as domain values, through the view the dashboard uses too."""
    return queues_json([queue_from_pb(q) for q in reply.queues], reply.fairness, reply.source,
                       resources_from_pb(reply.capacity))
