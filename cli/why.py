"""`tcl why JOB`: why a job waits, and why its tasks were preempted, in one place.

From two replies the master already gives (the job, the queue rows): the job's pending
reason (placement's word, then what preemption does or cannot do for it: which queue is
below its share, when a reclaim starts, what blocks it), its queue's standing against
its guarantee, the queues above theirs (where room would come from), and each task's
preemptions with the reason its last one gave (who preempted it and why), and the level
of the fairness tree that holds a waiting job back (`held_back_by`): its queue (it holds
its guaranteed share or more), its user (in a leaf shared by users, the owner holds its
part of the leaf or more: other users go first), or the job (its own place among its
owner's jobs, or its fit)."""

from __future__ import annotations

import argparse
import json

from tcluster.cli.client import MasterClient
from tcluster.cli.names import job_state_name, task_state_name
from tcluster.cli.options import EXIT_OK
from tcluster.cli.tables import task_state_counts
from tcluster.views.render import JsonDict
from tcluster.v1 import jobs_pb2


def why(args: argparse.Namespace, client: MasterClient) -> int:
    job = client.get(args.job_id)
    queues = client.list_queues()
    doc = why_json(job, queues)
    print(json.dumps(doc, indent=2) if args.output == "json" else why_text(doc))
    return EXIT_OK


def why_json(job: jobs_pb2.Job, reply: jobs_pb2.ListQueuesResponse) -> JsonDict:
    rows = {q.path: q for q in reply.queues if q.path}
    mine = rows.get(job.spec.queue)
    over = [{"queue": q.path, "share": round(q.dominant_share, 4), "guaranteed_share": round(q.guaranteed_share, 4)}
            for q in rows.values() if q.leaf and q.path != job.spec.queue and q.dominant_share > q.guaranteed_share + 1e-9]
    tasks = list(job.tasks)
    counts = task_state_counts(job)     # of every row, also those a compact job's reply leaves out
    return {
        "job": job.id, "state": job_state_name(job.state), "queue": job.spec.queue,
        "pending_tasks": counts["PENDING"],
        "running_tasks": counts["STARTING"] + counts["RUNNING"],
        "pending_reason": job.pending_reason,
        "queue_share": round(mine.dominant_share, 4) if mine is not None else None,
        "queue_guaranteed_share": round(mine.guaranteed_share, 4) if mine is not None else None,
        "queues_above_their_share": over,
        "backfilled": next((t.reason for t in tasks if t.reason.startswith("backfilled:")
                            and task_state_name(t.state) in ("STARTING", "RUNNING")), ""),
        "held_back_by": held_back_by(job, rows),
        "preempted": [{"task": t.index, "preemptions": t.preemptions, "state": task_state_name(t.state),
                       "reason": t.reason} for t in tasks if t.preemptions],
    }


def why_text(doc: JsonDict) -> str:
    lines = [f"job {doc['job']} in queue {doc['queue']}: {doc['state']} "
             f"({doc['running_tasks']} running, {doc['pending_tasks']} pending)"]
    if doc["pending_reason"]:
        lines.append(f"waits: {doc['pending_reason']}")
    elif doc["pending_tasks"] == 0:
        lines.append("nothing of it waits")
    if doc.get("backfilled"):
        lines.append(f"started: {doc['backfilled']}")
    if doc["queue_share"] is not None:
        lines.append(f"queue {doc['queue']} holds {doc['queue_share']:.2f} of the cluster; "
                     f"guaranteed {doc['queue_guaranteed_share']:.2f}")
    over = doc["queues_above_their_share"]
    if over:
        lines.append("queues above their guaranteed share: " + ", ".join(
            f"{q['queue']} ({q['share']:.2f} > {q['guaranteed_share']:.2f})" for q in over))
    held = doc["held_back_by"]
    if held is not None:
        lines.append(f"held back at the {held['level']} level: {held['why']}")
    for task in doc["preempted"]:
        lines.append(f"task {task['task']} was preempted {task['preemptions']} time(s), now {task['state']}: "
                     f"{task['reason']}")
    return "\n".join(lines)


def held_back_by(job: jobs_pb2.Job, rows: dict[str, jobs_pb2.Queue]) -> JsonDict | None:
    """The outermost level at which the waiting job has its share already (None: it does
    not wait)."""
    pending = task_state_counts(job)["PENDING"]
    if not pending or job_state_name(job.state) not in ("PENDING", "RUNNING"):
        return None
    path = job.spec.queue
    while path:
        q = rows.get(path)
        if q is not None and q.dominant_share >= q.guaranteed_share - 1e-9 and q.dominant_share > 0:
            return {"level": "queue", "queue": path,
                    "why": f"queue {path} holds {q.dominant_share:.2f}, at or above its guaranteed {q.guaranteed_share:.2f}"}
        path = path.rpartition(".")[0]
    user = job.spec.owner or job.spec.user
    leaf = rows.get(job.spec.queue)
    users = [q for q in rows.values() if q.user and q.parent == job.spec.queue]
    mine = next((q for q in users if q.user == user), None)
    if leaf is not None and mine is not None and len(users) > 1:
        part = leaf.dominant_share / len(users)
        if mine.dominant_share >= part - 1e-9:
            return {"level": "user", "user": user,
                    "why": f"{user} holds {mine.dominant_share:.2f}, at or above an even part ({part:.2f}) of queue "
                           f"{job.spec.queue}'s {leaf.dominant_share:.2f} among its {len(users)} users"}
    return {"level": "job", "why": "its turn among its owner's jobs, or where its tasks fit (see `waits`)"}
