"""List replies fit the message bound whatever the jobs hold (issue 36 #6): twelve ordinary
10,000-task jobs made a 4.65 MB reply, over the 4 MiB bound, and `tcl jobs` failed for
everybody. A page is cut where its bytes would pass the budget and the next page starts
after its last job, so following the tokens lists each job once."""

from __future__ import annotations

from pathlib import Path

import pytest

import tcluster.master.edge.grpc_api as grpc_api
from tcluster.v1 import jobs_pb2
from tests.component.harness import Harness, run


def test_a_page_past_the_byte_budget_is_cut_and_the_tokens_list_each_job_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        ids = [(await h.submit(["sleep", "9"], tasks=200)).id for _ in range(6)]
        one_job = (await h.job(ids[0])).ByteSize()
        monkeypatch.setattr(grpc_api, "LIST_BYTE_BUDGET", int(2.5 * one_job))   # two jobs a page
        seen, token, pages = [], "", 0
        while True:
            reply = await h.jobs.List(jobs_pb2.ListJobsRequest(all=True, page_token=token))
            pages += 1
            assert len(reply.jobs) == 2 and reply.ByteSize() < 3 * one_job, (len(reply.jobs), reply.ByteSize())
            assert reply.total == 6
            seen += [j.id for j in reply.jobs]
            token = reply.next_page_token
            if not token:
                break
        assert (seen, pages) == (ids[::-1], 3)            # newest first, each once
        monkeypatch.setattr(grpc_api, "LIST_BYTE_BUDGET", one_job // 2)       # one job alone is over it
        reply = await h.jobs.List(jobs_pb2.ListJobsRequest(limit=4))
        assert [j.id for j in reply.jobs] == [ids[-1]] and reply.next_page_token   # still one, and a way on
    run(scenario, tmp_path)


def test_a_job_that_cannot_be_encoded_does_not_fail_the_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36 #3: one job whose value overflowed its field (a throttle over 2^31-1) made
    every `tcl jobs` fail with UNKNOWN ValueError, for every user, across restarts."""
    real = grpc_api.job_to_pb
    broken: set[str] = set()

    def encode(job: object, *args: object, **kwargs: object) -> jobs_pb2.Job:
        if getattr(job, "id", "") in broken:
            raise ValueError("Value out of range: 4294967296")
        return real(job, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(grpc_api, "job_to_pb", encode)

    async def scenario(h: Harness) -> None:
        await h.start_master()
        ids = [(await h.submit(["true"])).id for _ in range(3)]
        broken.add(ids[1])
        reply = await h.jobs.List(jobs_pb2.ListJobsRequest())
        assert [j.id for j in reply.jobs] == ids[::-1]
        assert reply.jobs[1].reason.startswith("this job cannot be shown: Value out of range")
        assert reply.jobs[0].spec.command == ["true"]
    run(scenario, tmp_path)
