"""Issue 36: Get and List show a job with many task rows compactly (index ranges per state,
unfinished rows first), GetJobTasks pages through every row, and a job alone bigger than a
List page's budget is listed by id with why instead of failing the List."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest

import tcluster.master.edge.grpc_api as grpc_api
from tcluster.cli.main import main as tcl_main
from tcluster.master.edge import taskpages
from tcluster.v1 import common_pb2, jobs_pb2
from tests.component.harness import Harness, run


def test_compact_get_paged_rows_and_a_list_that_never_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(taskpages, "INLINE_TASK_ROWS", 5)

    async def scenario(h: Harness) -> None:
        await h.start_master()
        big = (await h.submit(["sleep", "9"], tasks=30)).id
        small = (await h.submit(["true"], tasks=2)).id
        job = await h.job(big)
        assert job.tasks_compact and job.task_rows == 30 and [t.index for t in job.tasks] == [0, 1, 2, 3, 4]
        assert [(r.state, r.indexes, r.count) for r in job.task_ranges] == [(common_pb2.TASK_PENDING, "0-29", 30)]
        assert "tcl status --all-tasks" in job.compact_note
        assert not (await h.job(small)).tasks_compact

        seen, start = [], 0
        while True:
            page = await h.jobs.GetJobTasks(jobs_pb2.JobTasksPageRequest(id=big, start_index=start, limit=7))
            assert len(page.tasks) <= 7 and page.total == 30
            seen += [t.index for t in page.tasks]
            if not page.more:
                break
            start = page.next_start_index
        assert seen == list(range(30))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await h.jobs.GetJobTasks(jobs_pb2.JobTasksPageRequest(id=big, limit=6000))
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "limit" in str(refused.value.details())
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await h.jobs.GetJobTasks(jobs_pb2.JobTasksPageRequest(id="nosuchjob"))
        assert missing.value.code() is grpc.StatusCode.NOT_FOUND

        # A job too big for a reply even alone: by id and why; the List itself answers.
        monkeypatch.setattr(grpc_api, "LIST_JOB_BYTE_LIMIT", job.ByteSize() - 1)
        reply = await h.jobs.List(jobs_pb2.ListJobsRequest())
        shown = {j.id: j for j in reply.jobs}
        assert set(shown) == {big, small} and not reply.next_page_token
        assert shown[big].reason.startswith("this job is too big to list (") and f"tcl status {big}" in shown[big].reason
        assert shown[big].state == jobs_pb2.JOB_PENDING and len(shown[small].tasks) == 2
    run(scenario, tmp_path)


def test_tcl_status_shows_ranges_and_all_tasks_on_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(taskpages, "INLINE_TASK_ROWS", 5)
    monkeypatch.setattr(taskpages, "DEFAULT_TASK_PAGE", 4)          # several pages for --all-tasks

    async def scenario(h: Harness) -> None:
        await h.start_master()
        big = (await h.submit(["sleep", "9"], tasks=12)).id
        capsys.readouterr()
        assert await asyncio.to_thread(tcl_main, ["--master", h.address, "status", big]) == 0
        text = capsys.readouterr().out
        assert "0/12 done (12 PENDING)" in text and "PENDING (12): 0-11" in text and "--all-tasks" in text, text
        assert await asyncio.to_thread(tcl_main, ["--master", h.address, "status", big, "-o", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["tasks_compact"] and doc["task_ranges"] == {"PENDING": {"indexes": "0-11", "count": 12}}
        assert len(doc["tasks"]) == 5
        assert await asyncio.to_thread(tcl_main, ["--master", h.address, "status", big, "--all-tasks",
                                                  "-o", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [t["index"] for t in doc["tasks"]] == list(range(12)) and "task_ranges" not in doc
    run(scenario, tmp_path)
