"""master/usagewatch.py as a table: who gets a UsageWatch, when, and how many at once."""

from __future__ import annotations

import math

import pytest

from tcluster.domain.errors import InvalidArgument
from tcluster.master.usagewatch import UsageWatches, checked_watch_s, watch_capacity


def test_first_ask_sends_then_only_after_half_the_watch_passed() -> None:
    w = UsageWatches(max_nodes=10)
    assert w.ask(["a", "b", "a"], now=0.0, for_s=30) == ["a", "b"]     # each node once
    assert w.ask(["a", "b"], now=1.0, for_s=30) == []                   # a poll a second costs nothing
    assert w.ask(["a"], now=15.5, for_s=30) == ["a"]                    # past half: renewed
    assert w.until == {"a": 45.5, "b": 30.0}


def test_the_cap_holds_and_expired_watches_free_their_place() -> None:
    w = UsageWatches(max_nodes=2)
    assert w.ask(["a", "b", "c"], now=0.0, for_s=10) == ["a", "b"]
    assert w.ask(["c"], now=5.0, for_s=10) == []                        # full: c stays at its interval
    assert w.ask(["c"], now=10.5, for_s=10) == ["c"]                    # a and b ended
    w.forget("c")
    assert "c" not in w.until


@pytest.mark.parametrize("for_s, max_nodes", [(0.0, 5), (10.0, 0)])
def test_no_watch_for_zero_length_or_zero_capacity(for_s: float, max_nodes: int) -> None:
    assert UsageWatches(max_nodes).ask(["a"], now=0.0, for_s=for_s) == []


def test_one_ask_is_cut_to_the_maximum() -> None:
    w = UsageWatches(max_nodes=1)
    w.ask(["a"], now=0.0, for_s=10_000)
    assert w.until["a"] == 120.0


def test_capacity_is_the_report_budget_at_the_heartbeat_interval() -> None:
    assert watch_capacity(250, 1.0) == 250
    assert watch_capacity(250, 0.2) == 50
    assert watch_capacity(0.5, 0.2) == 1          # always one node, so tcl top works in a tiny budget
    assert watch_capacity(0, 1.0) == 0


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_bad_lengths_name_the_field(bad: float) -> None:
    with pytest.raises(InvalidArgument, match="watch_usage_s.*seconds >= 0"):
        checked_watch_s(bad)
    assert checked_watch_s(500.0) == 120.0 and checked_watch_s(0.0) == 0.0
