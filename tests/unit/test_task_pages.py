"""Issue 36: replies that always fit. A job with more than INLINE_TASK_ROWS task rows is
sent compactly (some rows, unfinished first, and every row's index as ranges per state);
GetJobTasks pages through the full rows by index and by bytes. The figures: a 100,000-row
array's Get was every row (over the 4 MiB bound); now a few tens of KiB."""

from __future__ import annotations

import random

import pytest

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import Job, JobSpec, Task, TaskState
from tcluster.domain.resources import Resources
from tcluster.master.edge import taskpages
from tcluster.master.edge.taskpages import INLINE_TASK_ROWS, add_ranges, inline_rows, tasks_page
from tcluster.v1 import common_pb2, jobs_pb2
from tcluster.wire.protobuf import job_to_pb

MESSAGE_BOUND = 4 * 2**20
JOB = "abcd0001"


def array_job(rows: int) -> Job:
    return Job(id=JOB, spec=JobSpec(("sleep", "1"), Resources(1, 2**20), tasks=rows, array=f"0-{rows - 1}"),
               submitted_at=1.0)


def finished(index: int, state: TaskState = TaskState.SUCCEEDED) -> Task:
    return Task(JOB, index, state, node="node-a", attempt=1, exit_code=0 if state is TaskState.SUCCEEDED else 3,
                reason="" if state is TaskState.SUCCEEDED else "exited with code 3", started_at=1.0, finished_at=2.0)


def compact(job: Job, tasks: list[Task]) -> object:
    msg = job_to_pb(job, inline_rows(tasks))
    add_ranges(msg, tasks)
    return msg


def test_a_100k_row_array_was_over_the_bound_and_now_fits_in_ranges() -> None:
    rows = [finished(i, TaskState.FAILED if i % 1000 == 7 else TaskState.SUCCEEDED) for i in range(100_000)]
    rows[50_000] = Task(JOB, 50_000, TaskState.RUNNING, node="node-b", attempt=1)
    job = array_job(100_000)
    before = job_to_pb(job, rows).ByteSize()                 # every row, as Get sent it
    msg = compact(job, rows)
    after = msg.ByteSize()                                   # type: ignore[attr-defined]
    assert before > MESSAGE_BOUND and after < 128 * 1024, (before, after)
    assert msg.tasks_compact and msg.task_rows == 100_000 and len(msg.tasks) == INLINE_TASK_ROWS  # type: ignore[attr-defined]
    assert msg.tasks[0].index == 0 and 50_000 in {t.index for t in msg.tasks}   # type: ignore[attr-defined]
    ranges = {r.state: (r.indexes, r.count) for r in msg.task_ranges}            # type: ignore[attr-defined]
    assert ranges[common_pb2.TASK_RUNNING] == ("50000", 1)
    assert ranges[common_pb2.TASK_FAILED][0].startswith("7,1007,2007,") and ranges[common_pb2.TASK_FAILED][1] == 100
    assert ranges[common_pb2.TASK_SUCCEEDED][0].startswith("0-6,8-1006,1008-")
    assert ranges[common_pb2.TASK_SUCCEEDED][1] == 100_000 - 101
    print(f"\n100k-row Get: {before} bytes before, {after} after")


def test_a_small_job_is_sent_whole() -> None:
    rows = [finished(i) for i in range(INLINE_TASK_ROWS)]
    msg = compact(array_job(INLINE_TASK_ROWS), rows)
    assert not msg.tasks_compact and len(msg.tasks) == INLINE_TASK_ROWS and not msg.task_ranges  # type: ignore[attr-defined]


def test_ranges_that_would_not_fit_leave_counts_and_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(36)
    rows = [finished(i, rng.choice([TaskState.SUCCEEDED, TaskState.FAILED])) for i in range(20_000)]
    whole = compact(array_job(20_000), rows).ByteSize()                # type: ignore[attr-defined]
    monkeypatch.setattr(taskpages, "REPLY_BYTE_BUDGET", whole - 1)
    msg = compact(array_job(20_000), rows)
    assert msg.ByteSize() < whole // 2, (msg.ByteSize(), whole)         # type: ignore[attr-defined]
    assert all(r.indexes == "" for r in msg.task_ranges)                # type: ignore[attr-defined]
    assert sum(r.count for r in msg.task_ranges) == 20_000              # type: ignore[attr-defined]
    assert "do not fit a reply: counts only" in msg.compact_note        # type: ignore[attr-defined]


def test_pages_list_every_row_once_cut_by_count_and_bytes() -> None:
    rows = [finished(i) for i in range(0, 2500, 2)]                     # sparse indexes
    rng = random.Random(1)
    rng.shuffle(rows)
    one = tasks_page(rows, 0, 1).tasks[0].ByteSize()
    for limit, budget, per_page in ((500, 10**9, 500), (0, 10**9, 1000), (5000, 100 * (one + 8), 100)):
        seen, start, pages = [], 0, 0
        while True:
            page = tasks_page(rows, start, limit, budget)
            assert len(page.tasks) <= per_page and page.total == len(rows)
            seen += [t.index for t in page.tasks]
            pages += 1
            if not page.more:
                break
            start = page.next_start_index
        assert seen == list(range(0, 2500, 2)), (limit, budget)
        assert pages >= -(-len(rows) // per_page) and pages <= 2 * -(-len(rows) // per_page)


@pytest.mark.parametrize("start, limit, field", [(-1, 0, "start_index"), (0, -1, "limit"), (0, 5001, "limit")])
def test_bad_page_arguments_name_the_field(start: int, limit: int, field: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        tasks_page([], start, limit)
    assert refused.value.field == field and "allowed" in str(refused.value)


def test_the_reviews_twelve_10k_task_jobs_list_in_a_tenth_of_the_bytes() -> None:
    """Review of 649a338: twelve ordinary 10,000-task jobs made a 4.65 MB List (over the
    bound; paging by bytes on main then split it); compact, one page holds them all."""
    before, after = jobs_pb2.ListJobsResponse(), jobs_pb2.ListJobsResponse()
    for n in range(12):
        job = Job(id=f"job{n:05d}", spec=JobSpec(("sleep", "9"), Resources(1, 2**20), tasks=10_000), submitted_at=1.0)
        rows = [Task(job.id, i) for i in range(10_000)]
        before.jobs.append(job_to_pb(job, rows))
        after.jobs.append(compact(job, rows))              # type: ignore[arg-type]
    assert before.ByteSize() > MESSAGE_BOUND and after.ByteSize() < 2**20, (before.ByteSize(), after.ByteSize())
    print(f"\nList of 12 x 10,000-task jobs: {before.ByteSize()} bytes before, {after.ByteSize()} after")
