"""The tick's index of STARTING tasks (issue 11, step 6): whatever the order launches
begin and end in, and whether or not ticks settle, `due` is exactly what visiting every
STARTING task gave, in the same order."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from tcluster.master.core.startindex import StartIndex

IDS = [f"j.{i}" for i in range(12)]
OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.sampled_from(IDS), st.floats(0, 100)),
    st.tuples(st.just("discard"), st.sampled_from(IDS), st.just(0.0)),
    st.tuples(st.just("tick"), st.just(""), st.floats(0, 5)),
    st.tuples(st.just("peek"), st.just(""), st.floats(0, 200)),
), max_size=80)


@given(OPS, st.floats(0, 60))
@settings(max_examples=400, deadline=None)
def test_due_is_every_starting_task_past_the_limit_in_insertion_order(ops: list, limit: float) -> None:
    index, reference, now = StartIndex(), {}, 0.0
    for op, task_id, value in ops:
        if op == "add":
            index.add(task_id, value)
            reference.setdefault(task_id, value)
        elif op == "discard":
            index.discard(task_id)
            reference.pop(task_id, None)
        else:
            at = now + value if op == "tick" else value      # ticks move forward; peeks look anywhere
            expected = [(t, s) for t, s in reference.items() if at - s > limit]
            assert index.due(at, limit) == expected
            if op == "tick":
                now = at
                index.settle(now, limit)
        assert dict(index.since) == reference and len(index) == len(reference)


def test_a_tick_visits_the_expired_not_every_starting_task() -> None:
    index = StartIndex()
    for i in range(10_000):
        index.add(f"j.{i}", 1000.0 + (i * 7919) % 10_000)      # not in order of time
    index.add("old.0", 5.0)
    index.add("old.1", 6.0)
    visited = []
    index._valid = lambda seq, task_id: visited.append(task_id) or StartIndex._valid(index, seq, task_id)  # type: ignore[method-assign]
    assert index.due(130.0, 120.0) == [("old.0", 5.0), ("old.1", 6.0)]
    assert len(visited) == 2
    index.settle(130.0, 120.0)
    visited.clear()
    assert index.due(131.0, 120.0) == [("old.0", 5.0), ("old.1", 6.0)] and visited == []    # overdue, kept aside
