"""Issue 36: dependency chains' depth and the jobs waiting on one job are bounded at submit
(master/core/chains.py), with an error naming the field and the bound; the bounds hold
again after a master restart (depths recomputed from the held jobs)."""

from __future__ import annotations

import pytest

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import TaskState
from tcluster.master.core import chains
from tcluster.master.core.chains import MAX_CHAIN_DEPTH, MAX_WAITING_ON_ONE_JOB, chain_depth
from tcluster.master.core.events import Now, Submit
from tcluster.master.core.transitions import handle
from tests.unit.test_batch_transitions import end, run, spec, world
from tests.unit.test_master_transitions import World

IDS = [f"{i:08x}" for i in range(40)]


def test_the_bounds_are_far_above_real_use() -> None:
    assert MAX_CHAIN_DEPTH == 1000 and MAX_WAITING_ON_ONE_JOB == 1000


def test_a_chain_deeper_than_the_bound_is_refused_naming_field_and_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chains, "MAX_CHAIN_DEPTH", 5)
    w = world()
    w.do(Submit(IDS[0], spec()))                       # runs at once: starts no chain
    for before, after in zip(IDS[:5], IDS[1:6]):
        w.do(Submit(after, spec(dependency=f"afterok:{before}")))   # depths 1..5
    with pytest.raises(InvalidArgument) as refused:
        w.do(Submit(IDS[6], spec(dependency=f"afterok:{IDS[5]}")))
    assert refused.value.field == "dependency"
    assert "chain of 6 waiting jobs" in str(refused.value) and "at most 5" in str(refused.value)
    assert IDS[6] not in w.state.jobs
    # A master restart recomputes the depths from the held jobs: still refused.
    again = World(jobs=list(w.state.jobs.values()))
    with pytest.raises(InvalidArgument, match="at most 5"):
        again.do(Submit(IDS[6], spec(dependency=f"afterok:{IDS[5]}")))
    # Once the head has run, the chain is shorter and the same submit goes through.
    run(w, f"{IDS[0]}.0")
    end(w, f"{IDS[0]}.0", TaskState.SUCCEEDED)
    assert not w.state.jobs[IDS[1]].held
    run(w, f"{IDS[1]}.0")
    end(w, f"{IDS[1]}.0", TaskState.SUCCEEDED)
    w.do(Submit(IDS[6], spec(dependency=f"afterok:{IDS[5]}")))
    assert w.state.jobs[IDS[6]].held


def test_too_many_jobs_waiting_on_one_job_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chains, "MAX_WAITING_ON_ONE_JOB", 3)
    w = world()
    w.do(Submit(IDS[0], spec()))
    for job_id in IDS[1:4]:
        w.do(Submit(job_id, spec(dependency=f"afterany:{IDS[0]}")))
    with pytest.raises(InvalidArgument) as refused:
        w.do(Submit(IDS[4], spec(dependency=f"afterok:{IDS[0]}")))
    assert refused.value.field == "dependency"
    assert f"job '{IDS[0]}' already has 3 jobs waiting on it; at most 3" in str(refused.value)
    w.do(Submit(IDS[4], spec(dependency=f"afterok:{IDS[1]}")))      # through one that waits on it: fine
    assert w.state.jobs[IDS[4]].held


def test_depth_is_the_longest_waiting_path_and_needs_no_recursion() -> None:
    n = 20_000                                     # far past Python's recursion limit
    parents = {f"j{i}": ((f"j{i - 1}",) if i else ()) for i in range(n)}
    parents["fork"] = ("j5", f"j{n - 1}")
    cache: dict[str, int] = {}
    assert chain_depth("fork", lambda j: parents[j], lambda j: True, cache) == n + 1
    assert chain_depth("j5", lambda j: parents[j], lambda j: True, cache) == 6
    assert chain_depth("j5", lambda j: parents[j], lambda j: j != "j5", {}) == 0
    assert chain_depth("j9", lambda j: parents[j], lambda j: j != "j3", {}) == 6    # j3 no longer waits


def _held_chain() -> World:
    """IDS[0] runs; IDS[1] waits on it, IDS[2] on IDS[1]: the cache knows IDS[1]'s depth."""
    w = world()
    w.do(Submit(IDS[0], spec()))
    w.do(Submit(IDS[1], spec(dependency=f"afterok:{IDS[0]}")))
    w.do(Submit(IDS[2], spec(dependency=f"afterok:{IDS[1]}")))
    assert w.state.chain_depths == {IDS[1]: 1}
    return w


def test_a_refused_submit_leaves_the_depth_cache_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    w = _held_chain()
    monkeypatch.setattr(chains, "MAX_WAITING_ON_ONE_JOB", 1)     # refused after the depths were computed
    with pytest.raises(InvalidArgument, match="at most 1"):
        w.do(Submit(IDS[3], spec(dependency=f"afterok:{IDS[2]},afterok:{IDS[1]}")))
    assert w.state.chain_depths == {IDS[1]: 1}                    # was {IDS[1]: 1, IDS[2]: 2}


def test_a_submit_whose_write_failed_leaves_the_depth_cache_as_it_was() -> None:
    w = _held_chain()
    step = handle(w.state, Submit(IDS[3], spec(dependency=f"afterok:{IDS[2]}")), Now(1000.0, 0.0))
    assert step.chain_depths == {IDS[2]: 2}
    assert w.state.chain_depths == {IDS[1]: 1}                    # not applied (the write failed): unchanged
    w.state.apply(step)                                           # applied (written): kept
    assert w.state.chain_depths == {IDS[1]: 1, IDS[2]: 2}
