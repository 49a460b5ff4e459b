"""Issue 36: a job with over INLINE_TASK_ROWS rows is sent compactly (some rows, every
row's index by state as ranges). `tcl wait`'s exit code and first failed task, `tcl submit
--wait`'s failure line, and `tcl why`'s pending and running counts must read every row, not
only the rows sent: a 5,000-task job whose one failed index lies past the first 1,000 rows.
The replies come from the master's own code (master/edge/taskpages.py)."""

from __future__ import annotations

import argparse

import pytest

from tcluster.cli import commands, lifecycle
from tcluster.cli.why import why_json
from tcluster.domain.model import Job, JobSpec, Task, TaskState
from tcluster.domain.resources import Resources
from tcluster.master.edge.taskpages import add_ranges, inline_rows, tasks_page
from tcluster.v1 import jobs_pb2
from tcluster.wire.protobuf import job_to_pb

JOB = "abcd0036"
ROWS = 5000
FAILED_INDEX = 4321          # past the first 1,000 rows a compact Get sends


class FakeMaster:
    """Get and GetJobTasks as the master answers them, for one job of `rows`."""

    def __init__(self, rows: list[Task], state: int) -> None:
        self.rows, self.state, self.pages = rows, state, 0

    def get(self, job_id: str, watch_usage_s: float = 0.0) -> jobs_pb2.Job:
        job = Job(id=JOB, spec=JobSpec(("true",), Resources(1, 2**20), tasks=ROWS), submitted_at=1.0)
        msg = job_to_pb(job, inline_rows(self.rows))
        add_ranges(msg, self.rows)
        msg.state = self.state          # as the master derives it from every row's counts
        assert msg.tasks_compact and len(msg.tasks) < ROWS
        return msg

    def all_tasks(self, job_id: str) -> list[jobs_pb2.Task]:
        rows: list[jobs_pb2.Task] = []
        start = 0
        while True:
            self.pages += 1
            page = tasks_page(self.rows, start, 0)
            rows += page.tasks
            if not page.more:
                return rows
            start = page.next_start_index


def ended(state: TaskState, index: int) -> Task:
    failed = state is TaskState.FAILED
    return Task(JOB, index, state, node="n1", attempt=1, exit_code=3 if failed else 0,
                reason="exited with code 3" if failed else "", started_at=1.0, finished_at=2.0)


def one_failed() -> FakeMaster:
    rows = [ended(TaskState.FAILED if i == FAILED_INDEX else TaskState.SUCCEEDED, i) for i in range(ROWS)]
    return FakeMaster(rows, jobs_pb2.JOB_FAILED)


def test_tcl_wait_exits_with_the_failed_index_code_past_the_rows_sent(capsys: pytest.CaptureFixture[str]) -> None:
    master = one_failed()
    args = argparse.Namespace(job_ids=[JOB], timeout="", output="table")
    code = lifecycle.wait(args, master, clock=lambda: 0.0, sleep=lambda _: None)  # type: ignore[arg-type]
    assert code == 3                  # was 1: exit code 3 was in a row Get left out
    assert f"task {FAILED_INDEX} FAILED (exit 3" in capsys.readouterr().err
    assert master.pages >= 2          # paged through GetJobTasks


def test_a_succeeded_compact_job_needs_no_pages() -> None:
    master = FakeMaster([ended(TaskState.SUCCEEDED, i) for i in range(ROWS)], jobs_pb2.JOB_SUCCEEDED)
    args = argparse.Namespace(job_ids=[JOB], timeout="", output="table")
    assert lifecycle.wait(args, master, clock=lambda: 0.0, sleep=lambda _: None) == 0  # type: ignore[arg-type]
    assert master.pages == 0


def test_submit_wait_names_the_failed_index_past_the_rows_sent(capsys: pytest.CaptureFixture[str]) -> None:
    job = commands.wait_for_job(one_failed(), JOB, sleep=lambda _: None)   # type: ignore[arg-type]
    assert job.state == jobs_pb2.JOB_FAILED
    assert f"task {FAILED_INDEX} FAILED" in capsys.readouterr().err   # was no failure line at all


def test_tcl_why_counts_every_pending_and_running_row() -> None:
    running = 300
    rows = [Task(JOB, i, TaskState.RUNNING if i < running else TaskState.PENDING, node="n1" if i < running else "",
                 attempt=1 if i < running else 0) for i in range(ROWS)]
    doc = why_json(FakeMaster(rows, jobs_pb2.JOB_RUNNING).get(JOB), jobs_pb2.ListQueuesResponse())
    assert (doc["running_tasks"], doc["pending_tasks"]) == (running, ROWS - running)   # was (300, 700)
    assert doc["held_back_by"] is not None
