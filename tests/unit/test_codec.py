"""One codec per value: the job spec survives the store's JSON, the wire's protobuf and
the agent's launch record with every field intact."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest
from hypothesis import given, settings

from tcluster.wire.codec import spec_from_dict, spec_from_json, spec_to_dict, spec_to_json, usage_from_json, usage_to_json
from tcluster.domain.model import JobSpec, TaskUsage
from tcluster.domain.resources import Resources
from tcluster.wire.protobuf import spec_from_pb, spec_to_pb, usage_from_pb, usage_to_pb
from tests.unit.specs import SPEC_FIELDS, job_specs, usages


def test_every_field_has_a_strategy() -> None:
    assert set(SPEC_FIELDS) == {f.name for f in fields(JobSpec)}


@settings(max_examples=150, deadline=None)
@given(job_specs)
def test_spec_round_trips_through_json(spec: JobSpec) -> None:
    assert spec_from_json(spec_to_json(spec)) == spec


@settings(max_examples=150, deadline=None)
@given(job_specs)
def test_spec_round_trips_through_protobuf(spec: JobSpec) -> None:
    assert spec_from_pb(spec_to_pb(spec)) == spec
    assert spec_from_pb(type(spec_to_pb(spec)).FromString(spec_to_pb(spec).SerializeToString())) == spec


@settings(max_examples=100, deadline=None)
@given(usages)
def test_usage_round_trips(usage: TaskUsage) -> None:
    assert usage_from_json(usage_to_json(usage)) == usage
    assert usage_from_pb(usage_to_pb(usage)) == usage


def test_old_records_take_defaults_and_unknown_fields_are_refused() -> None:
    old = {"command": ["true"], "resources": {"cpu": 1.0, "memory": 0.0}, "pids_max": 77, "cpu_limit": 0.5}
    spec = spec_from_dict(old)
    assert (spec.pids_max, spec.cpu_limit, spec.retries) == (77, 0.5, 0)
    with pytest.raises(ValueError, match="bogus"):
        spec_from_dict({**spec_to_dict(spec), "bogus": 1})


def test_fields_added_since_the_first_release_are_written_only_when_set() -> None:
    """An older master refuses unknown fields: a spec that does not use request_id must
    read there as before (rolling upgrades and rollbacks of HA masters)."""
    plain = JobSpec(("true",), Resources.of({"cpu": 1.0, "memory": 0.0}))
    first_release = {f.name for f in fields(JobSpec)} - {"request_id"}
    assert set(spec_to_dict(plain)) <= first_release
    keyed = replace(plain, request_id="r-1")
    assert spec_to_dict(keyed)["request_id"] == "r-1" and spec_from_dict(spec_to_dict(keyed)) == keyed


def test_working_set_uses_inactive_file_and_falls_back_when_an_agent_does_not_send_it() -> None:
    known = TaskUsage(memory_bytes=1000, memory_file_bytes=600, memory_inactive_file_bytes=400)
    assert known.working_set_bytes == 600
    assert TaskUsage(memory_bytes=1000, memory_file_bytes=600).working_set_bytes == 400   # -1: minus all cache
    assert TaskUsage(memory_bytes=1000, memory_file_bytes=600, memory_inactive_file_bytes=0).working_set_bytes == 1000
    unknown = usage_to_pb(TaskUsage(memory_bytes=1000, memory_file_bytes=600))
    assert not unknown.HasField("memory_inactive_file_bytes")
    assert usage_from_pb(unknown).memory_inactive_file_bytes == -1
    zero = usage_to_pb(TaskUsage(memory_bytes=1000, memory_inactive_file_bytes=0))
    assert usage_from_pb(zero).memory_inactive_file_bytes == 0    # read and zero is not "not read"
