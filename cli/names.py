"""What the human tables read straight off a reply: state names (a state this client does
not know, a newer master's, prints by its number), task totals, used resources. Light on
purpose: `tcl status` and `tcl jobs` print with these without loading the job model."""

from __future__ import annotations

from tcluster.v1 import common_pb2, jobs_pb2
from tcluster.wire.basics import job_state_from_pb, resources_from_pb, resources_to_pb, task_state_from_pb


def job_state_name(value: int) -> str:
    try:
        return job_state_from_pb(value).value
    except ValueError:
        # An older/newer master may send a state this client does not know.
        return "UNSPECIFIED" if value == 0 else f"UNKNOWN({value})"


def shown_job_state(job: jobs_pb2.Job) -> str:
    """The state, with " (held)" while `tcl hold` keeps its pending tasks back."""
    held = job.held_by and job.state in (jobs_pb2.JOB_PENDING, jobs_pb2.JOB_RUNNING)
    return job_state_name(job.state) + (" (held)" if held else "")


def task_state_name(value: int) -> str:
    try:
        return task_state_from_pb(value).value
    except ValueError:
        return "UNSPECIFIED" if value == 0 else f"UNKNOWN({value})"


def tasks_total(msg: jobs_pb2.Job) -> int:
    return msg.spec.tasks or len(msg.tasks)


def used_resources(msg: jobs_pb2.Node) -> common_pb2.Resources:
    """capacity - free, per kind, never below zero (free may briefly exceed capacity)."""
    used = resources_from_pb(msg.capacity) - resources_from_pb(msg.free)
    return resources_to_pb(used.clamp_nonnegative())
