"""TaskUsage's field table covers the protobuf message both ways, and the views that read
it (Prometheus series, history columns, wire) keep the names they had."""

from __future__ import annotations

from dataclasses import fields

from tcluster.master.usage.history import MAX, MEAN, TASK
from tcluster.master.usage.metrics import TASK_METRICS
from tcluster.domain.taskusage import NOT_SENT, OPTIONAL, RATES, USAGE_FIELDS, TaskUsage
from tcluster.v1 import common_pb2
from tcluster.wire.protobuf import usage_from_pb, usage_to_pb

_ADDRESS = {"task_id", "attempt"}       # which sample it is, not a figure of it


def test_every_proto_field_has_an_entry_in_the_table() -> None:
    proto = {f.name for f in common_pb2.TaskUsage.DESCRIPTOR.fields} - _ADDRESS
    wire = {f.name for f in USAGE_FIELDS if f.wire}
    assert proto - wire == set(), "TaskUsage fields in the proto without a table entry (tcluster/domain/taskusage.py)"
    assert wire - proto == set(), "table entries marked wire=True that the proto lacks"


def test_the_table_is_the_dataclass_plus_its_derived_figures() -> None:
    names = [f.name for f in USAGE_FIELDS]
    assert names[:len(fields(TaskUsage))] == [f.name for f in fields(TaskUsage)]
    derived = USAGE_FIELDS[len(fields(TaskUsage)):]
    assert all(isinstance(getattr(TaskUsage, f.name, None), property) or f.column for f in derived)
    assert [f.name for f in derived if f.wire] == ["rates_derived"] and not any(f.json for f in derived)


def test_the_rates_travel_as_a_group_marked_as_derived() -> None:
    sent = usage_to_pb(TaskUsage(cpu_throttled_rate=0.0, io_read_rate=5.0, io_write_rate=0.0))
    assert sent.rates_derived and usage_from_pb(sent).io_read_rate == 5.0
    partial = usage_to_pb(TaskUsage(io_read_rate=5.0))          # the other two not derived: none sent
    assert not partial.rates_derived and partial.io_read_rate == 0.0
    assert [getattr(usage_from_pb(partial), name) for name in RATES] == [NOT_SENT] * 3


def test_optional_fields_are_optional_on_the_wire() -> None:
    by_name = common_pb2.TaskUsage.DESCRIPTOR.fields_by_name
    assert set(OPTIONAL) == {name for name, f in by_name.items() if f.has_presence and name not in _ADDRESS}
    assert set(RATES) <= set(by_name)


def test_series_and_columns_keep_their_names() -> None:
    assert sorted((name, counter) for name, _, counter, _ in TASK_METRICS) == sorted([
        ("cpu_usage_seconds", True), ("cpu_user_seconds", True), ("cpu_system_seconds", True),
        ("cpu_throttled_seconds", True), ("memory_working_set_bytes", False), ("memory_rss_bytes", False),
        ("memory_cache_bytes", False), ("memory_swap_bytes", False), ("memory_max_usage_bytes", False),
        ("pids", False)])
    assert TASK.fields == ("cpu_user", "cpu_system", "cpu_throttled", "memory_working_set", "memory_anon",
                           "memory_cache", "memory_swap", "pids", "io_read", "io_write")
    assert TASK.aggs == (MEAN, MEAN, MEAN, MAX, MAX, MAX, MAX, MAX, MEAN, MEAN)
