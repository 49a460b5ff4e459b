"""Lifecycle verbs in the master's transitions, as tables (README, "Hold, release,
requeue, wait"): hold keeps pending work from the scheduler and survives a reload from
the store's rows; requeue stops a running attempt first (never two copies) and sends an
ended task back to waiting with the next attempt number; a pending job's spec changes
only while no task runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tcluster.domain.arrays import parse_index_set
from tcluster.domain.errors import FailedPrecondition, InvalidArgument, NotFound
from tcluster.domain.model import JobState, JobSpec, TaskState
from tcluster.domain.resources import Resources
from tcluster.master.core.actions import TaskReport
from tcluster.master.core.events import HoldJob, Kill, KillMode, Launch, Place, Reports, RequeueTasks, Submit, UpdateJob
from tcluster.master.core.state import MasterState
from tcluster.wire.codec import job_extra_to_json, with_job_extra
from tests.unit.test_master_transitions import TIMEOUTS, World

A = "aaaa0001"


def spec(tasks: int = 2, **kw: object) -> JobSpec:
    return JobSpec(("true",), Resources(0.5, 2**20), tasks=tasks, **kw)  # type: ignore[arg-type]


def world(tasks: int = 2, **kw: object) -> World:
    w = World()
    w.join("n1")
    w.do(Submit(A, spec(tasks, **kw)))
    return w


def run(w: World, index: int, attempt: int = 1) -> None:
    w.do(Place(((f"{A}.{index}", "n1"),)))
    w.do(Reports("n1", (TaskReport(f"{A}.{index}", attempt, TaskState.RUNNING, at=1.0),), 1))


def end(w: World, index: int, state: TaskState, attempt: int = 1) -> None:
    code = 0 if state is TaskState.SUCCEEDED else 1
    w.do(Reports("n1", (TaskReport(f"{A}.{index}", attempt, state, exit_code=code, at=2.0),), 2))


# ---- hold / release ----

def test_hold_keeps_pending_work_from_the_scheduler_and_release_gives_it_back() -> None:
    w = world()
    w.do(HoldJob(A, "alice"))
    assert w.state.pending_views() == [] and w.state.jobs[A].held_by == "alice"
    assert w.state.job_view(w.state.jobs[A]).pending_reason == f"held by alice (tcl release {A})"
    w.do(HoldJob(A, "alice", hold=False))
    assert [v.job_id for v in w.state.pending_views()] == [A] and w.state.jobs[A].held_by == ""


def test_a_held_job_keeps_its_running_tasks_running() -> None:
    w = world()
    run(w, 0)
    step = w.do(HoldJob(A, "alice"))
    assert not step.kills_put and w.state.task(f"{A}.0").state is TaskState.RUNNING
    assert w.state.pending_views() == [] and w.state.jobs[A].state is JobState.RUNNING


@pytest.mark.parametrize("setup, hold, error, words", [
    ("none", True, NotFound, "not found"),
    ("ended", True, FailedPrecondition, "already ended"),
    ("all running", True, FailedPrecondition, "nothing pending to hold"),
    ("held", True, FailedPrecondition, "already held by alice"),
    ("fresh", False, FailedPrecondition, "is not held"),
])
def test_hold_and_release_refusals(setup: str, hold: bool, error: type[Exception], words: str) -> None:
    w = world()
    if setup == "ended":
        for i in (0, 1):
            run(w, i)
            end(w, i, TaskState.SUCCEEDED)
    if setup == "all running":
        run(w, 0)
        run(w, 1)
    if setup == "held":
        w.do(HoldJob(A, "alice"))
    with pytest.raises(error, match=words):
        w.do(HoldJob("nope0000" if setup == "none" else A, "bob", hold=hold))


def test_a_hold_is_in_the_stored_row_so_a_restart_keeps_it() -> None:
    w = world()
    w.do(HoldJob(A, "alice"))
    job = w.state.jobs[A]
    stored = with_job_extra(replace(job, held_by=""), job_extra_to_json(job))
    assert stored.held_by == "alice"
    reloaded = MasterState([stored], list(w.state.tasks[A]), [], [], TIMEOUTS, started_mono=0.0)
    assert A not in reloaded.pending_jobs


def test_a_held_array_offers_no_index() -> None:
    w = world(1, array="0-99")
    w.do(HoldJob(A, "alice"))
    assert w.state.pending_views() == []


# ---- requeue ----

def test_requeue_of_a_running_task_stops_it_first_and_the_next_attempt_follows_its_end() -> None:
    w = world(1)
    run(w, 0)
    step = w.do(RequeueTasks(A, None, "alice"))
    assert step.kills_put[(f"{A}.0", 1)].mode is KillMode.ASKED
    assert any(isinstance(a, Kill) for a in step.actions)
    assert w.state.task(f"{A}.0").state is TaskState.RUNNING        # never two copies: it waits for the end
    assert w.state.pending_views() == []
    end(w, 0, TaskState.KILLED)
    task = w.state.task(f"{A}.0")
    assert task.state is TaskState.PENDING and task.failures == 0 and task.preemptions == 0
    assert "attempt 1 requeued by alice" in task.reason
    step = w.do(Place(((f"{A}.0", "n1"),)))
    assert [a.attempt for a in step.actions if isinstance(a, Launch)] == [2]


def test_a_requeued_task_that_succeeds_during_its_stop_still_runs_again() -> None:
    w = world(1)
    run(w, 0)
    w.do(RequeueTasks(A, None, "alice"))
    end(w, 0, TaskState.SUCCEEDED)
    assert w.state.task(f"{A}.0").state is TaskState.PENDING and w.state.jobs[A].state is JobState.PENDING


def test_requeue_of_an_ended_job_makes_it_wait_again() -> None:
    w = world()
    for i in (0, 1):
        run(w, i)
    end(w, 0, TaskState.SUCCEEDED)
    end(w, 1, TaskState.FAILED)
    assert w.state.jobs[A].state is JobState.FAILED and w.state.jobs[A].finished_at
    w.do(RequeueTasks(A, parse_index_set("1"), "alice"))
    job, task = w.state.jobs[A], w.state.task(f"{A}.1")
    assert not job.state.terminal and not job.finished_at and A in w.state.pending_jobs
    assert task.state is TaskState.PENDING and task.exit_code is None and task.attempt == 1
    assert w.state.task(f"{A}.0").state is TaskState.SUCCEEDED
    assert w.state.finished_tasks == 0
    run(w, 1, attempt=2)
    end(w, 1, TaskState.SUCCEEDED, attempt=2)
    assert w.state.jobs[A].state is JobState.SUCCEEDED


@pytest.mark.parametrize("setup, tasks, error, words", [
    ("fresh", None, FailedPrecondition, "nothing to requeue"),
    ("cancelled", None, FailedPrecondition, "was cancelled"),
    ("array", "50", InvalidArgument, "no started or ended task 50"),
    ("gang", "0", InvalidArgument, "requeue the whole job"),
    ("none", None, NotFound, "not found"),
])
def test_requeue_refusals(setup: str, tasks: str | None, error: type[Exception], words: str) -> None:
    w = world(1, array="0-99") if setup == "array" else world(2, gang=True) if setup == "gang" else world()
    if setup == "cancelled":
        from tcluster.master.core.events import Cancel
        w.do(Cancel(A))
    with pytest.raises(error, match=words):
        w.do(RequeueTasks("nope0000" if setup == "none" else A,
                          parse_index_set(tasks) if tasks else None, "alice"))


# ---- update of a pending job ----

def test_update_of_a_pending_job_changes_its_spec_and_marks_it_for_writing() -> None:
    w = world()
    new = replace(w.state.jobs[A].spec, resources=Resources(2, 2**30), weight=3.0)
    step = w.do(UpdateJob(A, spec=new))
    assert step.specs == {A} and w.state.jobs[A].spec.resources == Resources(2, 2**30)
    assert w.state.pending_views()[0].weight == 3.0


@pytest.mark.parametrize("setup, cpu, words", [
    ("running", 1, "1 task\\(s\\) running or starting"),
    ("fresh", 64, "cpu"),                               # past every node's 4 cores: never fits
    ("ended", 1, "already ended"),
])
def test_update_refusals(setup: str, cpu: float, words: str) -> None:
    w = world(1)
    if setup in ("running", "ended"):
        run(w, 0)
    if setup == "ended":
        end(w, 0, TaskState.SUCCEEDED)
    new = replace(w.state.jobs[A].spec, resources=Resources(cpu, 2**20))
    with pytest.raises((FailedPrecondition, InvalidArgument), match=words):
        w.do(UpdateJob(A, spec=new))
    assert w.state.jobs[A].spec.resources == Resources(0.5, 2**20)


@pytest.mark.parametrize("array, ended, words", [
    ("", False, "not an array"),
    ("0-1", True, "already ended"),
])
def test_a_throttle_is_refused_on_a_plain_or_ended_job(array: str, ended: bool, words: str) -> None:
    w = world(1, array=array) if array else world(1)
    if ended:
        for i in (0, 1):
            run(w, i)
            end(w, i, TaskState.SUCCEEDED)
    with pytest.raises((FailedPrecondition, InvalidArgument), match=words):
        w.do(UpdateJob(A, throttle=2))
