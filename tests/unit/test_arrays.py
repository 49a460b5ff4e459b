"""Array indexes as ranges (tcluster/arrays.py): Slurm's syntax, splits and merges under
placements and cancels, and the compact forms `tcl status` prints."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tcluster.arrays import IndexSet, parse_array, parse_index_set
from tcluster.errors import InvalidArgument


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
    ("", "comma-separated parts"), ("5-1", "A <= B"), ("a-b", "is not N, A-B"), ("0-9%0", "%N with N >= 1"),
    ("0-9,5", "given twice"), ("0-99999999999", "A <= B <="),
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
