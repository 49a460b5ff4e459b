"""The dashboard API's bounded number parser: every bad value is a 400 naming the
parameter and the allowed range, never an OverflowError (the HTTP 500 of `tail=1e400`)."""

from __future__ import annotations

import pytest

from tcluster.domain.errors import InvalidArgument
from tcluster.master.web.params import INDEXES, LIMITS, TAILS, TIMES, indexes, number

CASES = [
    # query, name, allowed, value (None: refused)
    ({}, "tail", TAILS, 65536.0),
    ({"tail": ""}, "tail", TAILS, 65536.0),
    ({"tail": "4096"}, "tail", TAILS, 4096.0),
    ({"tail": "1e3"}, "tail", TAILS, 1000.0),
    ({"tail": "1e400"}, "tail", TAILS, None),
    ({"tail": "inf"}, "tail", TAILS, None),
    ({"tail": "nan"}, "tail", TAILS, None),
    ({"tail": "-1"}, "tail", TAILS, None),
    ({"tail": "1.5"}, "tail", TAILS, None),
    ({"tail": "9" * 5000}, "tail", TAILS, None),
    ({"limit": "1000"}, "limit", LIMITS, 1000.0),
    ({"limit": "1001"}, "limit", LIMITS, None),
    ({"limit": "ten"}, "limit", LIMITS, None),
    ({"since": "1795341600.5"}, "since", TIMES, 1795341600.5),
    ({"since": "-1e400"}, "since", TIMES, None),
    ({"until": "1e300"}, "until", TIMES, None),
]


@pytest.mark.parametrize("query, name, allowed, value", CASES)
def test_numbers_are_bounded(query: dict[str, str], name: str, allowed: object, value: float | None) -> None:
    if value is not None:
        assert number(query, name, 65536.0, allowed) == value  # type: ignore[arg-type]
        return
    with pytest.raises(InvalidArgument) as caught:
        number(query, name, 65536.0, allowed)  # type: ignore[arg-type]
    assert caught.value.field == name
    assert str(caught.value).startswith(f"{name}: ") and " from " in str(caught.value)
    assert len(str(caught.value)) < 200            # a long value is never echoed whole


def test_task_index_lists() -> None:
    assert indexes({"tasks": "0,3,,7"}, "tasks") == [0, 3, 7]
    assert indexes({}, "tasks") == []
    with pytest.raises(InvalidArgument, match=r"^tasks: '1e400' is not a whole number of task index"):
        indexes({"tasks": "0,1e400"}, "tasks")
    assert INDEXES.high == 2**31 - 1
