"""Batch work in the master's transitions, as tables (README, "Batch work"): array
bookkeeping (rows made as indexes are placed, cancels of some, throttles), dependencies
(ok / any / notok, or-lists, unmet, unknown, chains, restarts), time limits, and gangs
(restart or end on a failed member, the timeout)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tcluster.domain.arrays import parse_index_set
from tcluster.domain.errors import InvalidArgument
from tcluster.master.core.actions import TaskReport
from tcluster.master.core.events import (
    Cancel, CancelTasks, KillMode, Place, Reports, Submit, Tick, UpdateJob,
)
from tcluster.master.core.state import MasterState
from tcluster.domain.model import Job, JobSpec, JobState, TaskState
from tcluster.domain.resources import Resources
from tests.unit.test_master_transitions import TIMEOUTS, World

A, B, C = "aaaa0001", "bbbb0002", "cccc0003"


def spec(**kw: object) -> JobSpec:
    return JobSpec(("true",), Resources(0.1, 2**20), **kw)  # type: ignore[arg-type]


def world() -> World:
    w = World()
    w.join("n1")
    return w


def run(w: World, task_id: str, attempt: int = 1, node: str = "n1") -> None:
    w.do(Place(((task_id, node),)))
    w.do(Reports(node, (TaskReport(task_id, attempt, TaskState.RUNNING, at=1.0),), 1))


def end(w: World, task_id: str, state: TaskState, attempt: int = 1, node: str = "n1") -> None:
    w.do(Reports(node, (TaskReport(task_id, attempt, state, exit_code=0 if state is TaskState.SUCCEEDED else 1,
                                   at=2.0),), 2))


# ---- arrays ----

def test_an_array_writes_no_rows_until_placed() -> None:
    w = world()
    step = w.do(Submit(A, spec(array="0-999999%20")))
    assert step.tasks == {} and w.state.jobs[A].unplaced.text() == "0-999999" and w.state.jobs[A].throttle == 20
    assert w.state.jobs[A].spec.tasks == 1_000_000 and w.state.counts[A][TaskState.PENDING] == 1_000_000
    view = w.state.pending_views()[0]
    assert (view.pending, view.running) == (20, 0)                 # the throttle
    step = w.do(Place(((f"{A}.0", "n1"), (f"{A}.1", "n1"))))
    assert set(step.tasks) == {f"{A}.0", f"{A}.1"} and w.state.jobs[A].unplaced.text() == "2-999999"
    assert w.state.pending_views()[0].pending == 18
    assert w.state.task(f"{A}.1").state is TaskState.STARTING and w.state.task(f"{A}.7") is None


def test_throttle_changes_live_and_a_full_throttle_says_so() -> None:
    w = world()
    w.do(Submit(A, spec(array="0-9%1")))
    run(w, f"{A}.0")
    assert w.state.pending_views() == []
    assert "array throttle: 1 running, at most 1" in w.state.job_view(w.state.jobs[A]).pending_reason
    w.do(UpdateJob(A, throttle=3))
    assert w.state.pending_views()[0].pending == 2


def test_cancel_some_indexes_skips_unplaced_and_kills_running() -> None:
    w = world()
    w.do(Submit(A, spec(array="0-9")))
    run(w, f"{A}.5")
    step = w.do(CancelTasks(A, parse_index_set("4-6")))
    assert w.state.jobs[A].unplaced.text() == "0-3,7-9" and w.state.jobs[A].skipped.text() == "4,6"
    assert step.kills_put[(f"{A}.5", 1)].mode is KillMode.END
    assert w.state.counts[A][TaskState.PENDING] == 7 and w.state.counts[A][TaskState.KILLED] == 2


def test_cancelling_every_index_of_a_hundred_million_costs_the_runs() -> None:
    from tests.unit.test_arrays import _lines_run
    w = world()
    w.do(Submit(A, spec(array="0-99999999")))
    run(w, f"{A}.7")
    step, work = _lines_run(w.do, CancelTasks(A, parse_index_set("0-99999999")))
    job = w.state.jobs[A]
    assert not job.unplaced and job.skipped.text() == "0-6,8-99999999" and work < 500   # lines of arrays.py
    assert step.kills_put[(f"{A}.7", 1)].mode is KillMode.END
    assert w.state.counts[A][TaskState.PENDING] == 0 and w.state.counts[A][TaskState.KILLED] == 99_999_999
    assert job.cancelled and job.state is JobState.CANCELLED        # every index named: the job is cancelled


def test_cancels_that_would_fragment_an_array_past_the_bound_are_refused_unwritten() -> None:
    """Issue 36 #5: `--tasks A-B:STEP` cancels cut an array's runs without bound (the review:
    +2.4 MB of state a cancel, then replies over 4 MiB). Past MAX_INDEX_RUNS one is refused,
    naming the field, and changes nothing."""
    from tcluster.domain.arrays import MAX_INDEX_RUNS
    w = world()
    w.do(Submit(A, spec(array="0-99999999")))
    w.do(CancelTasks(A, parse_index_set("0-99999:3")))                 # a few stepped runs: kept
    w.do(CancelTasks(A, parse_index_set("200000-209900:100")))         # 100 runs: kept
    assert 100 < len(w.state.jobs[A].unplaced.runs) <= MAX_INDEX_RUNS
    before = (w.state.jobs[A].unplaced, w.state.jobs[A].skipped)
    with pytest.raises(InvalidArgument) as refused:                  # 100,000 runs (the review's ~2.4 MB)
        w.do(CancelTasks(A, parse_index_set("1000000-10999900:100")))
    assert refused.value.field == "tasks" and "into 100,1" in str(refused.value) and "at most 4,096" in str(refused.value)
    assert (w.state.jobs[A].unplaced, w.state.jobs[A].skipped) == before and not w.state.jobs[A].cancelled


def test_naming_only_some_indexes_leaves_the_job_running() -> None:
    w = world()
    w.do(Submit(A, spec(array="0-9")))
    run(w, f"{A}.7")
    w.do(CancelTasks(A, parse_index_set("0-6,8-99")))
    assert not w.state.jobs[A].cancelled and w.state.jobs[A].state is JobState.RUNNING


def test_an_array_ends_when_every_index_did() -> None:
    w = world()
    w.do(Submit(A, spec(array="3,5")))
    for i in (3, 5):
        run(w, f"{A}.{i}")
        end(w, f"{A}.{i}", TaskState.SUCCEEDED)
    assert w.state.jobs[A].state is JobState.SUCCEEDED and w.state.jobs[A].finished_at


def test_cancelling_an_array_skips_what_never_ran() -> None:
    w = world()
    w.do(Submit(A, spec(array="0-99999")))
    w.do(Cancel(A))
    job = w.state.jobs[A]
    assert job.state is JobState.CANCELLED and job.finished_at and not job.unplaced and len(job.skipped) == 100000


def test_a_restart_keeps_an_arrays_rows_and_ranges() -> None:
    w = world()
    w.do(Submit(A, spec(array="0-9")))
    run(w, f"{A}.0")
    again = MasterState(list(w.state.jobs.values()), [t for ts in w.state.tasks.values() for t in ts], [], [],
                        TIMEOUTS, 0.0)
    assert again.counts[A] == w.state.counts[A] and again.task(f"{A}.0").state is TaskState.RUNNING


# ---- dependencies ----

@pytest.mark.parametrize("kind, first_ends, released, cancelled", [
    ("afterok", TaskState.SUCCEEDED, True, False),
    ("afterok", TaskState.FAILED, False, True),
    ("afterany", TaskState.FAILED, True, False),
    ("afternotok", TaskState.FAILED, True, False),
    ("afternotok", TaskState.SUCCEEDED, False, True),
])
def test_a_dependency_resolves_on_the_predecessors_end(kind: str, first_ends: TaskState, released: bool,
                                                        cancelled: bool) -> None:
    w = world()
    w.do(Submit(A, spec()))
    w.do(Submit(B, spec(dependency=f"{kind}:{A}")))
    assert w.state.jobs[B].held and B not in w.state.pending_jobs
    assert f"waiting for dependency: {kind}:{A} (PENDING)" == w.state.job_view(w.state.jobs[B]).pending_reason
    run(w, f"{A}.0")
    end(w, f"{A}.0", first_ends)
    job = w.state.jobs[B]
    assert (job.released, job.cancelled) == (released, cancelled)
    if cancelled:
        assert job.state is JobState.CANCELLED and A in job.reason and A in w.state.task(f"{B}.0").reason
    else:
        assert B in w.state.pending_jobs


def test_a_failed_first_job_cancels_the_whole_chain_naming_each_predecessor() -> None:
    w = world()
    w.do(Submit(A, spec()))
    w.do(Submit(B, spec(dependency=f"afterok:{A}")))
    w.do(Submit(C, spec(dependency=f"afterok:{B}")))
    run(w, f"{A}.0")
    end(w, f"{A}.0", TaskState.FAILED)
    assert w.state.jobs[B].reason == f"cancelled: dependency can no longer be met: afterok:{A} (FAILED)"
    assert w.state.jobs[C].reason == f"cancelled: dependency can no longer be met: afterok:{B} (CANCELLED)"


def test_cancelling_the_head_of_a_chain_derives_each_job_a_bounded_number_of_times(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36 #4: every pass of the cascade re-derived every job the step had changed, so
    a chain of N cost O(N^2) on the loop (600 jobs: 6-20 s, the watchdog restarted the
    master and the cancel was lost). Now each job is derived when it changes: O(N)."""
    import tcluster.master.core.draft as draft
    calls = [0]
    real = draft.derive_job

    def counted(*args: object) -> object:
        calls[0] += 1
        return real(*args)  # type: ignore[arg-type]

    w = world()
    ids = [f"{i:08x}" for i in range(200)]
    w.do(Submit(ids[0], spec()))
    for before, after in zip(ids, ids[1:]):
        w.do(Submit(after, spec(dependency=f"afterok:{before}")))
    monkeypatch.setattr(draft, "derive_job", counted)
    w.do(Cancel(ids[0]))
    assert all(w.state.jobs[j].state is JobState.CANCELLED for j in ids)
    assert calls[0] <= 3 * len(ids), calls[0]                 # was 20,300 (N^2 / 2)


def test_or_lists_and_keeping_an_unmet_dependency() -> None:
    w = world()
    w.do(Submit(A, spec()))
    w.do(Submit(B, spec()))
    w.do(Submit(C, spec(dependency=f"afterok:{A}?afterok:{B}")))
    run(w, f"{A}.0")
    end(w, f"{A}.0", TaskState.FAILED)
    assert w.state.jobs[C].held                                   # B may still succeed
    run(w, f"{B}.0")
    end(w, f"{B}.0", TaskState.SUCCEEDED)
    assert w.state.jobs[C].released
    w.do(Submit("dddd0004", spec(dependency=f"afterok:{A}", keep_unmet=True)))
    assert w.state.jobs["dddd0004"].held
    assert "can no longer be met" in w.state.job_view(w.state.jobs["dddd0004"]).pending_reason


@pytest.mark.parametrize("dependency, message", [
    ("afterok:ffff0000", "not found"),
    (f"afterok:{A}", "can never be met"),
])
def test_unknown_and_never_met_dependencies_are_refused_at_submit(dependency: str, message: str) -> None:
    w = world()
    w.do(Submit(A, spec()))
    run(w, f"{A}.0")
    end(w, f"{A}.0", TaskState.FAILED)
    with pytest.raises(InvalidArgument, match=message):
        w.do(Submit(B, spec(dependency=dependency)))
    assert B not in w.state.jobs


def test_a_dependency_on_a_job_no_longer_in_memory_uses_its_stored_end() -> None:
    w = world()
    step = w.do(Submit(B, spec(dependency=f"afterok:{A}"), known=((A, JobState.SUCCEEDED),)))
    assert w.state.jobs[B].released and step.known_states == {A: JobState.SUCCEEDED}


# ---- time limits ----

def test_a_task_past_its_time_limit_ends_failed_timelimit_without_a_retry() -> None:
    w = world()
    w.do(Submit(A, spec(time_limit_s=3.0, retries=2)))
    run(w, f"{A}.0")                                   # started_at 1.0: deadline 4.0 (wall)
    assert w.do(Tick(), at=-997.5).kills_put == {}     # wall 2.5
    step = w.do(Tick(), at=-995.0)                     # wall 5.0
    intent = step.kills_put[(f"{A}.0", 1)]
    assert intent.mode is KillMode.TIMELIMIT and intent.reason.startswith("TimeLimit: ran past --time-limit 3s")
    end(w, f"{A}.0", TaskState.KILLED)
    task = w.state.task(f"{A}.0")
    assert (task.state, task.reason, task.failures) == (TaskState.FAILED, "TimeLimit", 0)
    assert w.state.jobs[A].state is JobState.FAILED


# ---- gangs ----

def gang_world(**kw: object) -> World:
    w = world()
    w.do(Submit(A, spec(tasks=3, gang=True, **kw)))
    w.do(Place(tuple((f"{A}.{i}", "n1") for i in range(3))))
    w.do(Reports("n1", tuple(TaskReport(f"{A}.{i}", 1, TaskState.RUNNING, at=1.0) for i in range(3)), 1))
    return w


def test_a_failed_member_ends_the_gang() -> None:
    w = gang_world()
    step = w.do(Reports("n1", (TaskReport(f"{A}.1", 1, TaskState.FAILED, exit_code=3, at=2.0),), 2))
    assert {k[0] for k in step.kills_put} == {f"{A}.0", f"{A}.2"}
    assert all(k.mode is KillMode.END and "gang member 1 FAILED" in k.reason for k in step.kills_put.values())


def test_gang_restart_requeues_every_member_and_counts_one_failure() -> None:
    w = gang_world(gang_restart=True)
    step = w.do(Reports("n1", (TaskReport(f"{A}.1", 1, TaskState.FAILED, exit_code=3, at=2.0),), 2))
    assert all(k.mode is KillMode.GANG for k in step.kills_put.values()) and len(step.kills_put) == 2
    for i in (0, 2):
        end(w, f"{A}.{i}", TaskState.KILLED)
    states = [(t.state, t.failures) for t in w.state.tasks[A]]
    assert states == [(TaskState.PENDING, 0), (TaskState.PENDING, 1), (TaskState.PENDING, 0)]


def test_a_gang_not_all_running_by_its_timeout_restarts() -> None:
    w = world()
    w.do(Submit(A, replace(spec(tasks=2, gang=True), gang_timeout_s=10.0)))
    w.do(Place(((f"{A}.0", "n1"), (f"{A}.1", "n1"))), at=0.0)
    w.do(Reports("n1", (TaskReport(f"{A}.0", 1, TaskState.RUNNING, at=1.0),), 1))
    assert w.do(Tick(), at=5.0).kills_put == {}
    step = w.do(Tick(), at=11.0)
    assert {k[0] for k in step.kills_put} == {f"{A}.0", f"{A}.1"}
    assert all("not RUNNING within 10s" in k.reason for k in step.kills_put.values())


def test_an_index_placed_on_a_node_gone_since_the_round_stays_unplaced() -> None:
    w = world()
    w.do(Submit(A, spec(array="0-2")))
    step = w.do(Place(((f"{A}.0", "gone"), (f"{A}.1", "n1"))))
    assert set(step.tasks) == {f"{A}.1"} and w.state.jobs[A].unplaced.text() == "0,2"
    assert w.state.counts[A][TaskState.PENDING] == 2 and w.state.counts[A][TaskState.STARTING] == 1


def test_many_indexes_of_one_array_leave_its_ranges_in_one_place() -> None:
    w = world()
    w.do(Submit(A, spec(array="0-99:3")))
    taken = [0, 3, 9, 30, 99]
    step = w.do(Place(tuple((f"{A}.{i}", "n1") for i in taken)))
    assert sorted(step.tasks) == sorted(f"{A}.{i}" for i in taken)
    assert w.state.jobs[A].unplaced.text() == "6,12-27:3,33-96:3" and len(w.state.jobs[A].unplaced) == 29
    assert w.state.counts[A][TaskState.PENDING] == 29 and w.state.counts[A][TaskState.STARTING] == 5


@pytest.mark.parametrize("throttle", [2**31, 10**12, -1])
def test_a_throttle_out_of_range_is_refused_and_not_written(throttle: int) -> None:
    """Issue 36 #3: `tcl update --throttle 2147483648` was answered INVALID_ARGUMENT but
    written; from then on every List failed (the int32 field overflowed)."""
    w = world()
    w.do(Submit(A, spec(array="0-99%5")))
    with pytest.raises(InvalidArgument, match="throttle"):
        w.do(UpdateJob(A, throttle=throttle))
    assert w.state.jobs[A].throttle == 5
    with pytest.raises(InvalidArgument, match="N in 1..100,000,000"):
        parse_array_text("0-9%4294967296")


def parse_array_text(text: str) -> None:
    from tcluster.domain.arrays import parse_array
    parse_array(text)
