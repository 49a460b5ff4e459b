"""Pinned jobs: a federated task (issue 25) runs as a one-task job that its Local Manager
already checked against this master's state, on the node a global manager chose. It is
placed at once, bypassing the fairness queues (the GM decided), and never elsewhere:
while its node has no room it waits for that node (after a preemption's victims end, or
a launch the agent never got).

The job's labels say so, under the reserved `tcluster.io/` prefix that a user's Submit
may not use (check_user_labels): only the LM service makes them. They also let the LM
rebuild, after a restart, which running tasks are whose."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import JobSpec, TaskState
from tcluster.domain.nodelabels import RESERVED_PREFIX
from tcluster.domain.resources import Resources

if TYPE_CHECKING:
    from tcluster.master.core.state import MasterState

PIN_NODE = "tcluster.io/pin-node"               # the only node the job's task may run on
FED_GM = "tcluster.io/federation-gm"            # the index of the GM that owns the task
FED_TASK = "tcluster.io/federation-task"        # the federated task id, <fed job>.<index>
FED_QUEUE = "tcluster.io/federation-queue"      # the task's queue at its GM (usage per queue, Alg. 2)
FEDERATION_OWNER = "tcluster:federation"        # the owner of federated jobs: never a user's name (no ":" there)


def label(spec: JobSpec, key: str) -> str:
    return next((v for k, v in spec.labels if k == key), "")


def pinned_node(spec: JobSpec) -> str:
    """The node a pinned job must run on; "" for every other job."""
    return label(spec, PIN_NODE) if spec.owner == FEDERATION_OWNER else ""


def check_user_labels(labels: Iterable[tuple[str, str]]) -> None:
    """A user's job may not carry tcluster's own labels (a pin would bypass fairness)."""
    for key, _ in labels:
        if key.startswith(RESERVED_PREFIX):
            raise InvalidArgument("labels", f"{key[:64]!r} is reserved: keys under {RESERVED_PREFIX} are set by "
                                            "tcluster itself (federated tasks); use another key")


def pinnable(state: "MasterState", node: str) -> bool:
    """A pinned task may start on the node: it is known and schedulable (connected, READY,
    not cordoned, draining, drained or in maintenance). A pinned task bypasses the fairness
    round, not the operator's node state: it waits until the node is schedulable again."""
    return node in state.nodes and state.matrix.is_schedulable(node)


def pinned_round(state: "MasterState") -> tuple[set[str], list[tuple[str, str]], dict[str, str]]:
    """The waiting pinned jobs (kept out of the fairness round), those of their tasks that
    their node has room for now, and why the others wait. Pure: reads the state."""
    pinned: set[str] = set()
    placements: list[tuple[str, str]] = []
    reasons: dict[str, str] = {}
    room: dict[str, Resources] = {}          # node -> what this round's placements left
    for job_id in sorted(state.pending_jobs):
        job = state.jobs[job_id]
        node = pinned_node(job.spec)
        if not node:
            continue
        pinned.add(job_id)
        waiting = [t for t in state.tasks[job_id] if t.state is TaskState.PENDING]
        if pinnable(state, node) and waiting:
            room.setdefault(node, state.free(node))
        if node in room and job.spec.resources.fits_in(room[node]):
            placements.append((waiting[0].id, node))      # a pinned job has one task
            room[node] = room[node] - job.spec.resources
        else:
            why = "room there" if pinnable(state, node) else "it to be schedulable (connected and READY)"
            reasons[job_id] = f"federated task pinned to node {node}: waits for {why}"
    return pinned, placements, reasons
