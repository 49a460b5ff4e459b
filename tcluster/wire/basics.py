"""The wire codes of the small values (task and job states, resource vectors): the part of
wire.py a client needs to print a reply, without the job model behind the rest of it."""

from __future__ import annotations

from tcluster.domain.resources import Resources
from tcluster.domain.states import JobState, TaskState
from tcluster.v1 import common_pb2, jobs_pb2

_TASK_STATE_TO_PB = {
    TaskState.PENDING: common_pb2.TASK_PENDING,
    TaskState.STARTING: common_pb2.TASK_STARTING,
    TaskState.RUNNING: common_pb2.TASK_RUNNING,
    TaskState.SUCCEEDED: common_pb2.TASK_SUCCEEDED,
    TaskState.FAILED: common_pb2.TASK_FAILED,
    TaskState.KILLED: common_pb2.TASK_KILLED,
    TaskState.LOST: common_pb2.TASK_LOST,
}
_TASK_STATE_FROM_PB: dict[int, TaskState] = {v: k for k, v in _TASK_STATE_TO_PB.items()}
_JOB_STATE_TO_PB = {
    JobState.PENDING: jobs_pb2.JOB_PENDING,
    JobState.RUNNING: jobs_pb2.JOB_RUNNING,
    JobState.SUCCEEDED: jobs_pb2.JOB_SUCCEEDED,
    JobState.FAILED: jobs_pb2.JOB_FAILED,
    JobState.CANCELLED: jobs_pb2.JOB_CANCELLED,
}
_JOB_STATE_FROM_PB: dict[int, JobState] = {v: k for k, v in _JOB_STATE_TO_PB.items()}


def resources_to_pb(r: Resources) -> common_pb2.Resources:
    return common_pb2.Resources(cpu=r.cpu, memory=r.memory, other=dict(r.other))


def resources_from_pb(msg: common_pb2.Resources) -> Resources:
    other = msg.other
    if not other:        # the usual case, every heartbeat: what Resources.of makes of cpu and memory alone
        return Resources(float(msg.cpu), int(msg.memory))
    return Resources.of({"cpu": msg.cpu, "memory": msg.memory, **dict(other)})


def task_state_to_pb(state: TaskState) -> common_pb2.TaskState:
    return _TASK_STATE_TO_PB[state]


def task_state_from_pb(value: int) -> TaskState:
    try:
        return _TASK_STATE_FROM_PB[value]
    except KeyError:
        raise ValueError(f"unknown task state {value}") from None


def job_state_to_pb(state: JobState) -> jobs_pb2.JobState:
    return _JOB_STATE_TO_PB[state]


def job_state_from_pb(value: int) -> JobState:
    try:
        return _JOB_STATE_FROM_PB[value]
    except KeyError:
        raise ValueError(f"unknown job state {value}") from None
