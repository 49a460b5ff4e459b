"""Array indexes as ranges (tcluster/domain/arrays.py): Slurm's syntax, splits and merges under
placements and cancels, and the compact forms `tcl status` prints."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tcluster.domain.arrays import IndexSet, parse_array, parse_index_set
from tcluster.domain.errors import InvalidArgument


@pytest.mark.parametrize("text, indexes, throttle", [
    ("0-9", list(range(10)), 0),
    ("1,3,5-7", [1, 3, 5, 6, 7], 0),
    ("0-99:2", list(range(0, 100, 2)), 0),
    ("0-999%50", list(range(1000)), 50),
    ("7", [7], 0),
    ("0-10:5", [0, 5, 10], 0),
])
def test_slurm_forms(text: str, indexes: list[int], throttle: int) -> None:
    got, limit = parse_array(text)
    assert list(got) == indexes and len(got) == len(indexes) and limit == throttle


@pytest.mark.parametrize("text, message", [
    ("", "comma-separated parts"), ("5-1", "A <= B"), ("a-b", "is not N, A-B"), ("0-9%0", "%N with N in 1.."),
    ("0-9,5", "must not overlap"), ("0-99999999999", "A <= B <="),
])
def test_bad_forms_name_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_array(text)


def test_a_million_indexes_are_one_run() -> None:
    indexes, _ = parse_array("0-999999")
    assert indexes.runs == ((0, 999999, 1),) and len(indexes) == 1_000_000
    taken, rest = indexes.take(20)
    assert taken == list(range(20)) and rest.runs == ((20, 999999, 1),)
    assert rest.without([500]).text() == "20-499,501-999999"
    assert rest.compact() == "[20-999999]"


def test_without_and_union_split_and_merge() -> None:
    s = IndexSet.span(10)
    gone = s.without(parse_index_set("2-4,7"))
    assert gone.text() == "0-1,5-6,8-9" and len(gone) == 6
    assert gone.union(parse_index_set("2-4,7")).text() == "0-9"
    stepped = parse_array("0-20:4")[0].without([8])
    assert stepped.text() == "0-4:4,12-20:4" and list(stepped) == [0, 4, 12, 16, 20]


def test_cancel_forms_take_no_throttle() -> None:
    with pytest.raises(InvalidArgument, match="no %N"):
        parse_index_set("1-3%2")


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 200), max_size=60), st.sets(st.integers(0, 200), max_size=30), st.integers(0, 70))
def test_set_algebra_matches_python_sets(base: set[int], gone: set[int], n: int) -> None:
    s = IndexSet.of(base)
    assert list(s) == sorted(base) and len(s) == len(base)
    assert list(s.without(gone)) == sorted(base - gone)
    taken, rest = s.take(n)
    assert taken == sorted(base)[:n] and list(rest) == sorted(base)[n:]
    assert IndexSet.of(base) == parse_array(s.text())[0] if base else True
    assert all(i in s for i in base) and all(i not in s for i in set(range(201)) - base)


@pytest.mark.parametrize("text", ["0-100,5-6,50", "0-99999999:2,1-99999999:2", "1-10,10", "0-9,3-4:2"])
def test_runs_that_overlap_are_refused_in_one_pass(text: str) -> None:
    with pytest.raises(InvalidArgument, match="runs must not overlap"):
        parse_array(text)


def _lines_run(fn, *args):
    """How many lines of tcluster/domain/arrays.py a call executes: work counted, not timed."""
    import sys
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if frame.f_code.co_filename.endswith("tcluster/domain/arrays.py"):
            if event == "line":
                count += 1
            return tracer
        return None
    sys.settrace(tracer)
    try:
        result = fn(*args)
    finally:
        sys.settrace(None)
    return result, count


def test_cancelling_from_a_hundred_million_indexes_costs_the_runs_not_the_indexes() -> None:
    big = parse_array("0-99999999")[0]
    rest, work = _lines_run(big.without, parse_index_set("0-99999999"))
    assert rest == IndexSet() and work < 500
    rest, work = _lines_run(big.without, parse_index_set("5-9,50000000-59999999"))
    assert rest.text() == "0-4,10-49999999,60000000-99999999" and work < 500
    odd, work = _lines_run(big.without, parse_index_set("0-199998:2"))
    assert odd.runs == ((1, 199997, 2), (199999, 99999999, 1)) and work < 500
    stepped = parse_array("0-99999998:2")[0]
    gone, work = _lines_run(stepped.intersection, parse_index_set("0-99999999"))
    assert gone == stepped and work < 500
    gone, work = _lines_run(stepped.intersection, parse_array("1-99999999:2")[0])
    assert gone == IndexSet() and work < 500


def test_a_stepped_cancel_is_bounded_and_says_so() -> None:
    with pytest.raises(InvalidArgument, match="at most 100,000"):
        parse_index_set("0-99999999:2")
    assert len(parse_index_set("0-199998:2")) == 100_000


def test_stored_sets_may_interleave() -> None:
    from tcluster.domain.arrays import index_set_from_text
    skipped = IndexSet.span(100).without(parse_index_set("0-98:2"))
    both = skipped.union(parse_index_set("0-98:2"))
    assert index_set_from_text(both.text()) == both and sorted(both) == list(range(100))
    assert sorted(index_set_from_text(both.text()).without(parse_index_set("10-89"))) == [*range(10), *range(90, 100)]


_runs = st.tuples(st.integers(0, 150), st.integers(0, 60), st.integers(1, 7)).map(
    lambda t: (t[0], t[0] + t[1] // t[2] * t[2], t[2]))


def _stepped_set(runs: list[tuple[int, int, int]]) -> tuple[IndexSet, set[int]]:
    """A set of arbitrary (possibly interleaved) disjoint runs, and the same as a Python set."""
    taken: set[int] = set()
    kept = []
    for first, last, step in runs:
        values = set(range(first, last + 1, step))
        if not values & taken:
            taken |= values
            kept.append((first, last, step))
    from tcluster.domain.arrays import index_set_from_text
    return index_set_from_text(",".join(f"{a}-{b}:{s}" for a, b, s in kept)), taken


@settings(max_examples=300, deadline=None)
@given(st.lists(_runs, max_size=8), st.lists(_runs, max_size=8))
def test_stepped_algebra_matches_python_sets(a_runs, b_runs) -> None:
    a, a_set = _stepped_set(a_runs)
    b, b_set = _stepped_set(b_runs)
    assert set(a) == a_set and len(a) == len(a_set)
    assert sorted(a.without(b)) == sorted(a_set - b_set)
    assert sorted(a.intersection(b)) == sorted(a_set & b_set)
    rest = a.without(b)
    assert len(rest) == len(a_set - b_set)
    assert all((i in rest) == (i in a_set - b_set) for i in range(0, 220))
