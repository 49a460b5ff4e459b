"""Issue 26's pure parts as tables: launches gathered per node, the usage interval from the
cluster size, which usage changed enough to send, when a report is due."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tcluster.wire.features import (
    ReportDue, UsageThreshold, batch_by_node, changed_usage, report_due, report_silence_limit, usage_interval,
)


@dataclass(frozen=True)
class L:          # a launch for a node
    node: str
    name: str


@dataclass(frozen=True)
class K:          # anything else for a node (a kill)
    node: str
    name: str


@dataclass(frozen=True)
class B:
    node: str
    launches: tuple


def batched_nodes(*nodes: str):  # type: ignore[no-untyped-def]
    return lambda a: a.node if isinstance(a, L) and a.node in nodes else None


@pytest.mark.parametrize("actions,batching,expected", [
    # one node's three launches become one batch where the first was
    ([L("a", "1"), L("a", "2"), L("a", "3")], ("a",), [B("a", (L("a", "1"), L("a", "2"), L("a", "3")))]),
    # nodes interleaved: one batch each, in the order of each node's first launch
    ([L("a", "1"), L("b", "1"), L("a", "2"), L("b", "2")], ("a", "b"),
     [B("a", (L("a", "1"), L("a", "2"))), B("b", (L("b", "1"), L("b", "2")))]),
    # an older agent (not batching) gets its launches one by one
    ([L("a", "1"), L("a", "2")], (), [L("a", "1"), L("a", "2")]),
    # a batch of one stays a plain launch
    ([L("a", "1"), K("b", "k")], ("a",), [L("a", "1"), K("b", "k")]),
    # another action for the node closes its batch: the agent sees the decided order
    ([L("a", "1"), L("a", "2"), K("a", "k"), L("a", "3"), L("a", "4")], ("a",),
     [B("a", (L("a", "1"), L("a", "2"))), K("a", "k"), B("a", (L("a", "3"), L("a", "4")))]),
    # ...but another node's action does not
    ([L("a", "1"), K("b", "k"), L("a", "2")], ("a",), [B("a", (L("a", "1"), L("a", "2"))), K("b", "k")]),
    ([], ("a",), []),
])
def test_launches_for_one_node_go_in_one_batch(actions, batching, expected) -> None:  # type: ignore[no-untyped-def]
    assert batch_by_node(actions, batched_nodes(*batching), B) == expected


@pytest.mark.parametrize("nodes,budget,floor,expected", [
    (10_000, 250.0, 1.0, 40.0),     # 10,000 nodes within 250 reports/s
    (2_000, 250.0, 1.0, 8.0),
    (100, 250.0, 1.0, 1.0),         # a small cluster keeps the heartbeat interval
    (1_000_000, 250.0, 1.0, 60.0),  # capped
    (100, 250.0, 5.0, 5.0),         # never below the floor
    (100, 0.0, 1.0, 1.0),           # no budget: the floor
])
def test_usage_interval_keeps_the_cluster_within_its_budget(nodes, budget, floor, expected) -> None:  # type: ignore[no-untyped-def]
    assert usage_interval(nodes, budget, floor) == expected
    if floor <= expected < 60 and budget > 0:
        assert nodes / expected <= budget + 1e-9


def test_a_silent_stream_node_is_given_two_missed_reports_on_top_of_the_node_timeout() -> None:
    assert report_silence_limit(15, 40) == 95
    assert report_silence_limit(15, 0) == 15


MiB = 2**20


@pytest.mark.parametrize("last,now,expected", [
    ({}, {"t": (1, 0.5, 100 * MiB)}, ["t"]),                                  # never sent
    ({"t": (1, 0.5, 100 * MiB)}, {"t": (1, 0.52, 101 * MiB)}, []),           # within the threshold
    ({"t": (1, 0.5, 100 * MiB)}, {"t": (1, 0.56, 100 * MiB)}, ["t"]),        # cpu moved 0.06 core
    ({"t": (1, 0.5, 100 * MiB)}, {"t": (1, 0.5, 106 * MiB)}, ["t"]),         # memory moved 6 %
    ({"t": (1, 0.5, 10 * MiB)}, {"t": (1, 0.5, 13 * MiB)}, []),              # 30 % but under 4 MiB
    ({"t": (1, 0.5, 100 * MiB)}, {"t": (2, 0.5, 100 * MiB)}, ["t"]),         # a new attempt
    ({"t": (1, 0.5, 1)}, {"u": (1, 0.5, 1), "t": (1, 0.5, 1)}, ["u"]),
])
def test_only_usage_that_moved_beyond_the_threshold_is_sent(last, now, expected) -> None:  # type: ignore[no-untyped-def]
    assert changed_usage(last, now, UsageThreshold()) == expected


@pytest.mark.parametrize("since,state_changed,usage_changed,expected", [
    (0.1, True, False, ReportDue(True, "changed")),      # a task started or ended: at once
    (40.0, False, False, ReportDue(True, "interval")),   # nothing changed: once per interval
    (5.0, False, False, ReportDue(False)),
    (5.0, False, True, ReportDue(False)),                # usage moved, but within a quarter interval
    (10.0, False, True, ReportDue(True, "usage")),
    (0.5, False, True, ReportDue(False)),
])
def test_a_report_goes_when_something_changed_or_the_interval_passed(since, state_changed, usage_changed,
                                                                       expected) -> None:  # type: ignore[no-untyped-def]
    assert report_due(100.0 + since, 100.0, 40.0, state_changed, usage_changed, 1.0) == expected
