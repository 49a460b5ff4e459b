"""The simulators' event clock (sim/clock.py): time first, then kind, then tie, then push order."""

from __future__ import annotations

from tcluster.sim.clock import EventHeap


def test_events_come_by_time_then_kind_then_tie_then_push_order() -> None:
    clock: EventHeap[str] = EventHeap()
    for time, kind, event, tie in [(2.0, 0, "late", 0), (1.0, 1, "b-first-pushed", 0), (1.0, 1, "b-second", 0),
                                   (1.0, 0, "a", 0), (1.0, 2, "c-tie-2", 2), (1.0, 2, "c-tie-1", 1)]:
        clock.push(time, kind, event, tie)
    assert len(clock) == 6 and clock.peek() == 1.0 and clock.now == 0.0
    order = []
    while clock:
        kind, event = clock.pop()
        order.append((clock.now, kind, event))
    assert order == [(1.0, 0, "a"), (1.0, 1, "b-first-pushed"), (1.0, 1, "b-second"), (1.0, 2, "c-tie-1"),
                     (1.0, 2, "c-tie-2"), (2.0, 0, "late")]
    assert len(clock) == 0 and not clock
