from __future__ import annotations

import asyncio

import pytest

from tcluster.agent.outbox import Outbox
from tcluster.agent.runtime.base import RawUsage
from tcluster.domain.constraints import parse_labels
from tcluster.agent.rates import cpu_rate, to_task_usage
from tcluster.domain.model import TaskState
from tcluster.domain.reports import TaskReport


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
        box.mark_sent(4)   # a Register carried them all
        assert box.take_unsent() == [] and [s for s, _ in box.unacked()] == [3, 4]
    asyncio.run(body())


def test_register_carries_a_bounded_batch_and_the_rest_follow_as_events(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async def body() -> None:
        box = Outbox(tmp_path / "outbox.jsonl")
        for i in range(1200):
            box.add(TaskReport(f"j.{i}", 1, TaskState.SUCCEEDED))
        carried = box.unacked(500)
        box.mark_sent(carried[-1][0])
        assert box.ready.is_set()
        batches = [box.take_unsent(), box.take_unsent(), box.take_unsent()]
        assert [len(b) for b in batches] == [500, 200, 0]
        again = Outbox(tmp_path / "outbox.jsonl")           # a restarted agent still has them all
        assert len(again.unacked()) == 1200
        box.ack(1000)
        assert len(Outbox(tmp_path / "outbox.jsonl").unacked()) == 200
    asyncio.run(body())


def test_cpu_rate_uses_the_monotonic_clock_when_it_has_it() -> None:
    """A wall-clock step (NTP) between samples must not make a rate."""
    before, after = RawUsage(at=1000, mono=50, cpu_ns=0), RawUsage(at=-5000, mono=52, cpu_ns=10**9)
    assert cpu_rate(before, after) == pytest.approx(0.5)


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


def test_reports_the_master_never_acknowledged_are_sent_again() -> None:
    async def body() -> None:
        box = Outbox()
        box.add(TaskReport("j.0", 1, TaskState.RUNNING))
        assert len(box.take_unsent()) == 1
        import time as _time
        now = _time.monotonic()
        assert not box.resend_if_stuck(now, 10.0)             # just sent
        assert box.resend_if_stuck(now + 11, 10.0)            # no ack for 11 s: everything again
        assert [s for s, _ in box.take_unsent()] == [1]
        box.ack(1)
        assert not box.resend_if_stuck(now + 100, 10.0)       # nothing left to resend
    asyncio.run(body())


def test_the_agent_derives_every_rate_of_its_counters() -> None:
    before = RawUsage(at=10, mono=5, throttled_ns=0, io_read_bytes=0, io_write_bytes=100, net_tx_bytes=0,
                      net_rx_bytes=10)
    now = RawUsage(at=12, mono=7, throttled_ns=10**9, io_read_bytes=8192, io_write_bytes=100, net_tx_bytes=1000,
                   net_rx_bytes=10)
    u = to_task_usage(before, now, 0)
    assert (u.cpu_throttled_rate, u.io_read_rate, u.io_write_rate) == (0.5, 4096.0, 0.0)
    assert (u.net_tx_rate, u.net_rx_rate) == (4000.0, 0.0)
    first = to_task_usage(None, now, 0)          # no interval yet: every rate 0, and sent as such
    assert (first.cpu_throttled_rate, first.io_read_rate, first.net_tx_rate) == (0.0, 0.0, 0.0)
