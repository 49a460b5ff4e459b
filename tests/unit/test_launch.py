"""One launch record from master to agent: what the master sends is what the agent gets."""

from __future__ import annotations

from hypothesis import given, settings

from tcluster.domain.launch import Launch
from tcluster.domain.model import JobSpec
from tcluster.domain.resources import Resources
from tcluster.v1 import agent_pb2
from tcluster.wire.protobuf import launch_from_pb, launch_to_pb
from tests.unit.specs import job_specs


@settings(max_examples=50, deadline=None)
@given(job_specs)
def test_a_launch_round_trips_through_protobuf_less_its_addressee(spec: JobSpec) -> None:
    sent = Launch("0123abcd.3", 2, "0123abcd", 3, spec, node="n1", lotes_class=1)
    wire = agent_pb2.LaunchTask.FromString(launch_to_pb(sent).SerializeToString())
    assert launch_from_pb(wire) == Launch("0123abcd.3", 2, "0123abcd", 3, spec, lotes_class=1)


def test_an_untagged_launch_has_no_class_on_the_wire() -> None:
    msg = launch_to_pb(Launch("0123abcd.0", 1, "0123abcd", 0, JobSpec(("true",), Resources(1, 1)), node="n1"))
    assert not msg.HasField("lotes_class") and launch_from_pb(msg).lotes_class is None
