"""The wire forms of issue 26: a batch of launches as LaunchTasks (cut by size), what an
agent announces in Register, and the old forms still read and written."""

from __future__ import annotations

import pytest

from tcluster.wire.features import AGENT_FEATURES, LAUNCH_BATCH
from tcluster.domain.launch import Launch
from tcluster.master.core.actions import LaunchBatch
from tcluster.master.edge import agent_codec
from tcluster.master.edge.agent_codec import inbound_from_pb, outbound_to_pbs
from tcluster.domain.model import JobSpec
from tcluster.domain.resources import Resources
from tcluster.v1 import agent_pb2
from tcluster.wire.protobuf import launch_from_pb

SPEC = JobSpec(("sleep", "9"), Resources(1, 2**20))


def launches(n: int, spec: JobSpec = SPEC) -> tuple[Launch, ...]:
    return tuple(Launch(f"0123abcd.{i}", 1, "0123abcd", i, spec, node="n1", preemptions=i % 2) for i in range(n))


def test_a_batch_is_one_launch_tasks_message_reading_as_the_single_launches() -> None:
    batch = launches(50)
    [message] = outbound_to_pbs(LaunchBatch("n1", batch))
    assert message.WhichOneof("kind") == "launches"
    got = [launch_from_pb(m) for m in message.launches.launches]
    assert got == [Launch(x.task_id, x.attempt, x.job_id, x.index, x.spec, preemptions=x.preemptions) for x in batch]


def test_a_single_launch_keeps_the_old_form() -> None:
    [message] = outbound_to_pbs(launches(1)[0])
    assert message.WhichOneof("kind") == "launch" and message.launch.task_id == "0123abcd.0"


def test_a_large_batch_is_cut_into_messages_under_the_size_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_codec, "BATCH_BYTES", 2000)
    messages = outbound_to_pbs(LaunchBatch("n1", launches(100)))
    assert len(messages) > 1 and all(m.ByteSize() < 4000 for m in messages)
    assert [m.task_id for msg in messages for m in msg.launches.launches] == [f"0123abcd.{i}" for i in range(100)]


def register(**fields: object) -> agent_pb2.AgentMessage:
    reg = agent_pb2.Register(node="n1", **fields)  # type: ignore[arg-type]
    reg.capacity.cpu, reg.capacity.memory = 4, 2**30
    return agent_pb2.AgentMessage(register=reg)


def test_register_features_and_interval_are_read_and_an_older_agent_states_none() -> None:
    new = inbound_from_pb(register(features=list(AGENT_FEATURES), usage_interval_s=12.0))
    assert new.features == frozenset(AGENT_FEATURES) and new.usage_interval_s == 12.0   # type: ignore[union-attr]
    old = inbound_from_pb(register())          # the previous version's Register
    assert old.features == frozenset() and old.usage_interval_s == 0.0   # type: ignore[union-attr]
    unknown = inbound_from_pb(register(features=[LAUNCH_BATCH, "from-the-future"]))
    assert LAUNCH_BATCH in unknown.features    # type: ignore[union-attr]


@pytest.mark.parametrize("fields,fragment", [
    ({"usage_interval_s": -1.0}, "register.usage_interval_s"),
    ({"usage_interval_s": float("nan")}, "register.usage_interval_s"),
    ({"usage_interval_s": 1e9}, "register.usage_interval_s"),
    ({"features": ["x"] * 33}, "register.features"),
    ({"features": ["x" * 64]}, "register.features"),
])
def test_bad_register_fields_are_refused_naming_the_field(fields, fragment) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=fragment):
        inbound_from_pb(register(**fields))
