"""When the disk refuses writes the master refuses new work with a clear error, keeps
serving reads, and resumes by itself once writes work again. (tests/faults does the same
with a real read-only and full filesystem under the real binary.)"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from tcluster.master.store.sqlite import Store
from tcluster.v1 import jobs_pb2
from tests.component.harness import Harness, run, wait_until


def _done(job: jobs_pb2.Job) -> bool:
    return job.state in (jobs_pb2.JOB_SUCCEEDED, jobs_pb2.JOB_FAILED, jobs_pb2.JOB_CANCELLED)


def test_refuses_work_serves_reads_and_recovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = {"on": False}
    real = Store.apply_many

    def flaky(self: Store, steps: list) -> None:  # type: ignore[type-arg]
        if broken["on"] and any(step.durable for step, _ in steps):
            import sqlite3
            from tcluster.master.store.sqlite import StoreError
            raise StoreError("the master cannot write its state (database or disk is full)") from sqlite3.OperationalError()
        real(self, steps)

    monkeypatch.setattr(Store, "apply_many", flaky)

    async def scenario(h: Harness) -> None:
        await h.start_master()
        await h.add_agent("n1")
        first = await h.wait_job((await h.submit(["true"])).id, _done)
        broken["on"] = True
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await h.submit(["true"])
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE and "cannot write" in info.value.details()
        listed = await h.jobs.List(jobs_pb2.ListJobsRequest())
        assert [j.id for j in listed.jobs] == [first.id]                 # the refused job left no trace
        assert (await h.job(first.id)).state == jobs_pb2.JOB_SUCCEEDED
        await h.cluster.ListNodes(jobs_pb2.ListNodesRequest())
        broken["on"] = False
        second = await h.submit(["true"])                                 # no restart needed
        await h.wait_job(second.id, _done)
        assert (await h.job(second.id)).state == jobs_pb2.JOB_SUCCEEDED  # the agent registered again
    run(scenario, tmp_path)


def test_finished_jobs_leave_memory_but_stay_listed_and_readable(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master(resident_finished_jobs=2)
        await h.add_agent("n1")
        ids = []
        for _ in range(5):
            job = await h.submit(["true"])
            await h.wait_job(job.id, _done)
            ids.append(job.id)
        assert h.master is not None
        assert sum(j in h.master.service.state.jobs for j in ids) <= 2      # the rest only on disk
        for job_id in ids:
            assert (await h.job(job_id)).state == jobs_pb2.JOB_SUCCEEDED
        seen, token = [], ""
        while True:
            page = await h.jobs.List(jobs_pb2.ListJobsRequest(limit=2, page_token=token))
            seen += [j.id for j in page.jobs]
            assert page.total == 5
            if not (token := page.next_page_token):
                break
        assert seen == ids[::-1]                                              # newest first, each once
        succeeded = await h.jobs.List(jobs_pb2.ListJobsRequest(states=[jobs_pb2.JOB_SUCCEEDED], all=True))
        assert len(succeeded.jobs) == 5
    run(scenario, tmp_path)
