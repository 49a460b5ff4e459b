from __future__ import annotations

import pytest

from tcluster.domain.lifecycle import can_transition, job_state
from tcluster.domain.model import JobSpec, JobState, TaskState as T
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.resources import Resources


@pytest.mark.parametrize("current,target,allowed", [
    (T.PENDING, T.STARTING, True), (T.PENDING, T.RUNNING, False), (T.STARTING, T.RUNNING, True),
    (T.STARTING, T.SUCCEEDED, True), (T.STARTING, T.PENDING, True), (T.RUNNING, T.FAILED, True),
    (T.RUNNING, T.PENDING, False), (T.SUCCEEDED, T.RUNNING, False), (T.LOST, T.RUNNING, False),
    (T.KILLED, T.SUCCEEDED, False), (T.RUNNING, T.LOST, True),
])
def test_task_transitions(current: T, target: T, allowed: bool) -> None:
    assert can_transition(current, target) is allowed


@pytest.mark.parametrize("states,cancelled,expected", [
    ([T.PENDING, T.PENDING], False, JobState.PENDING),
    ([T.STARTING, T.PENDING], False, JobState.RUNNING),
    ([T.SUCCEEDED, T.PENDING], False, JobState.RUNNING),
    ([T.SUCCEEDED, T.SUCCEEDED], False, JobState.SUCCEEDED),
    ([T.SUCCEEDED, T.FAILED], False, JobState.FAILED),
    ([T.FAILED, T.RUNNING], False, JobState.RUNNING),
    ([T.SUCCEEDED, T.LOST], False, JobState.FAILED),
    ([T.RUNNING, T.KILLED], True, JobState.CANCELLED),
    ([T.KILLED], False, JobState.FAILED),
])
def test_job_state_from_tasks(states: list[T], cancelled: bool, expected: JobState) -> None:
    assert job_state(states, cancelled) is expected


@pytest.mark.parametrize("spec,field", [
    (JobSpec(command=(), resources=Resources(1)), "command"),
    (JobSpec(command=(" ",), resources=Resources(1)), "command"),
    (JobSpec(command=("x",), resources=Resources(1), tasks=0), "tasks"),
    (JobSpec(command=("x",), resources=Resources(1), queue="a..b"), "queue"),
    (JobSpec(command=("x",), resources=Resources(1), name="bad name"), "name"),
    (JobSpec(command=("x",), resources=Resources(1), env=(("1X", "v"),)), "env"),
    (JobSpec(command=("x",), resources=Resources(1), workdir="rel"), "workdir"),
    (JobSpec(command=("x",), resources=Resources(-1)), "resources.cpu"),
])
def test_job_spec_validation_names_the_field(spec: JobSpec, field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        spec.validate()
    assert info.value.field == field
