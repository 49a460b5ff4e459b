from __future__ import annotations

import asyncio

import pytest

from tcluster.agent.outbox import Outbox
from tcluster.agent.runtime.base import RawUsage
from tcluster.agent.settings import parse_labels
from tcluster.agent.usage import cpu_rate, to_task_usage
from tcluster.model import TaskState
from tcluster.reports import TaskReport


@pytest.mark.parametrize("prev,cur,rate", [
    (None, RawUsage(at=10, cpu_ns=5 * 10**9), 0.0),
    (RawUsage(at=10, cpu_ns=0), RawUsage(at=12, cpu_ns=10**9), 0.5),
    (RawUsage(at=10, cpu_ns=0), RawUsage(at=11, cpu_ns=2 * 10**9), 2.0),
    (RawUsage(at=10, cpu_ns=0), RawUsage(at=10, cpu_ns=10**9), 0.0),  # no interval
])
def test_cpu_rate_is_delta_over_interval(prev: RawUsage | None, cur: RawUsage, rate: float) -> None:
    assert cpu_rate(prev, cur) == pytest.approx(rate)


def test_peak_is_the_highest_seen_when_the_kernel_has_none() -> None:
    u = to_task_usage(None, RawUsage(at=1, memory_bytes=100, memory_peak_bytes=0), peak_seen=300)
    assert u.memory_peak_bytes == 300 and u.memory_bytes == 100


def test_outbox_resends_unacked_after_reconnect() -> None:
    async def body() -> None:
        box = Outbox()
        for i in range(3):
            box.add(TaskReport(f"j.{i}", 1, TaskState.RUNNING))
        assert [s for s, _ in box.take_unsent()] == [1, 2, 3]
        assert box.take_unsent() == []
        box.ack(2)
        assert [s for s, _ in box.unacked()] == [3]
        box.add(TaskReport("j.9", 1, TaskState.SUCCEEDED))
        box.mark_all_sent()   # a Register carried them all
        assert box.take_unsent() == [] and [s for s, _ in box.unacked()] == [3, 4]
    asyncio.run(body())


@pytest.mark.parametrize("text,expected", [
    ("", {}), ("rack=r1", {"rack": "r1"}), ("rack=r1, disk=ssd", {"rack": "r1", "disk": "ssd"}),
    ("gpu=", {"gpu": ""}), ("topology.kubernetes.io/zone=a", {"topology.kubernetes.io/zone": "a"}),
])
def test_labels_parse(text: str, expected: dict[str, str]) -> None:
    assert parse_labels(text) == expected


@pytest.mark.parametrize("bad", ["rack", "ra ck=1", "rack=r 1", "rack=r1;x", "=v", "k=" + "v" * 64])
def test_labels_with_illegal_characters_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_labels(bad)
