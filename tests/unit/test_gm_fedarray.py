"""Issue 35: a federated job's --array with a throttle (gm/fedarray.py): the bounds, refused
naming the field, and the throttle's admission, as a table and a Hypothesis property (at no
moment more admitted than the throttle; every index admitted exactly once; a cancelled held
task is passed over)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from tcluster.gm.fedarray import ArrayThrottle, array_indexes, throttle_of
from tcluster.gm.service import check_spec
from tcluster.gm.store import TaskRow
from tcluster.v1 import common_pb2, jobs_pb2


def _spec(array: str, tasks: int = 1) -> jobs_pb2.JobSpec:
    return jobs_pb2.JobSpec(queue="a", tasks=tasks, array=array, command=["true"],
                            resources=common_pb2.Resources(cpu=1, memory=2**28))


@pytest.mark.parametrize("array, indexes, throttle", [
    ("0-7%2", list(range(8)), 2),
    ("0-15%4", list(range(16)), 4),
    ("1,3,5-7", [1, 3, 5, 6, 7], 0),
    ("0-10:5%3", [0, 5, 10], 3),
    ("9999", [9999], 0),
])
def test_an_array_is_one_task_per_index(array: str, indexes: list[int], throttle: int) -> None:
    assert array_indexes(_spec(array), 10_000) == (indexes, throttle)
    assert check_spec(_spec(array)) is None
    assert throttle_of(_spec(array)) == throttle


@pytest.mark.parametrize("array, tasks, words", [
    ("0-10000", 1, "spec.array: 10001 indexes; a federated job has at most 10000"),
    ("0-7%9", 1, "spec.array: %9 is more than the array's 8 indexes"),
    ("0-7%0", 1, "spec.array"),
    ("0-7%4294967296", 1, "spec.array"),
    ("100000000", 1, "spec.array: '100000000': need A <= B <= 99999999"),
    ("x-y", 1, "spec.array"),
    ("0-7", 4, "spec.tasks: an array's task count is its indexes'"),
])
def test_a_bad_array_is_refused_naming_the_field(array: str, tasks: int, words: str) -> None:
    error = check_spec(_spec(array, tasks))
    assert error is not None and words in error, error


def _rows(job: str, indexes: list[int]) -> list[TaskRow]:
    return [TaskRow(f"{job}.{i}", job, i, "a", "PENDING", 0, None, None, None, "", 0, "") for i in indexes]


def test_the_throttle_lets_one_in_per_end_and_passes_over_a_cancelled_one() -> None:
    throttle = ArrayThrottle()
    first = throttle.admit("f0-1", 2, [], _rows("f0-1", list(range(5))))
    assert [r.idx for r in first] == [0, 1]
    cancelled = {"f0-1.2"}
    pending = lambda t: t not in cancelled           # noqa: E731
    assert throttle.ended("f0-1.0", pending) == "f0-1.3"     # 2 was cancelled while held
    assert throttle.ended("f0-1.9", pending) is None          # not one of its admitted tasks
    assert throttle.ended("f0-1.1", pending) == "f0-1.4"
    assert throttle.jobs == {}                                # nothing held: forgotten
    assert throttle.ended("f0-1.3", pending) is None


def test_after_a_restart_running_tasks_count_against_the_throttle() -> None:
    throttle = ArrayThrottle()
    assert [r.idx for r in throttle.admit("f0-1", 3, ["f0-1.0", "f0-1.1"], _rows("f0-1", [2, 3, 4]))] == [2]
    assert throttle.admit("f0-2", 0, [], _rows("f0-2", [0, 1])) == _rows("f0-2", [0, 1])    # no throttle


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 40), limit=st.integers(1, 10), seed=st.integers(0, 2**32))
def test_never_more_than_the_throttle_and_each_index_once(count: int, limit: int, seed: int) -> None:
    rng = random.Random(seed)
    throttle = ArrayThrottle()
    active = [r.task_id for r in throttle.admit("f0-1", limit, [], _rows("f0-1", list(range(count))))]
    admitted = list(active)
    while active:
        assert len(active) <= limit
        done = active.pop(rng.randrange(len(active)))
        nxt = throttle.ended(done, lambda t: True)
        if nxt is not None:
            active.append(nxt)
            admitted.append(nxt)
    assert sorted(admitted) == sorted(f"f0-1.{i}" for i in range(count))
