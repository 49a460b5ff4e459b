"""The agent's usage reports as a transition table (issue 26): calls at given times with
given samples -> what is sent (None: nothing)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tcluster.agent.reporting import UsageReporter as Reporter

MiB = 2**20


@dataclass(frozen=True)
class U:
    cpu_rate: float
    memory_bytes: int


A, B = U(0.5, 100 * MiB), U(0.8, 200 * MiB)


def test_an_older_master_gets_every_sample_every_time() -> None:
    r: Reporter[U] = Reporter()
    usage = {"t": (1, A)}
    assert [r.decide(t, "free", usage, 0.0, 1.0) for t in (0, 1, 2)] == [usage] * 3


# steps: (time, free, usage) -> expected keys sent (None: no report). interval 40 s, floor 1 s.
@pytest.mark.parametrize("steps", [
    [  # first report carries everything; then nothing until the interval; then every task again
        ((0, "f1", {"t": (1, A)}), ["t"]),   # (a steady task's counters moved: dashboards integrate them)
        ((1, "f1", {"t": (1, A)}), None),
        ((39, "f1", {"t": (1, A)}), None),
        ((40, "f1", {"t": (1, A)}), ["t"]),
        ((41, "f1", {"t": (1, A)}), None),
    ],
    [  # a task starts: free changes -> at once, carrying only the new task
        ((0, "f1", {"t": (1, A)}), ["t"]),
        ((2, "f2", {"t": (1, A), "u": (1, B)}), ["u"]),
        ((3, "f2", {"t": (1, A), "u": (1, B)}), None),
    ],
    [  # usage moves beyond the threshold: sent, but not before a quarter interval
        ((0, "f1", {"t": (1, A)}), ["t"]),
        ((5, "f1", {"t": (1, B)}), None),
        ((10, "f1", {"t": (1, B)}), ["t"]),
        ((20, "f1", {"t": (1, B)}), None),
    ],
    [  # a task ends: its attempt is gone -> a report at once, with nothing to carry
        ((0, "f1", {"t": (1, A), "u": (1, B)}), ["t", "u"]),
        ((1, "f2", {"t": (1, A)}), []),
        ((2, "f3", {"t": (1, A), "u": (2, B)}), ["u"]),      # a new attempt of u counts as new
    ],
])
def test_reports_go_on_change_or_per_interval_carrying_what_moved(steps) -> None:  # type: ignore[no-untyped-def]
    r: Reporter[U] = Reporter()
    for (now, free, usage), expected in steps:
        sent = r.decide(float(now), free, usage, 40.0, 1.0)
        assert (None if sent is None else sorted(sent)) == expected, (now, sent)
