"""Issue 34: `tcl submit --mem unlimited` (memory 0 on the wire) runs where the agent allows
it. An agent started with `--no-unlimited-memory` labels itself
`tcluster.io/memory-limit-required`, and such a job carries the constraint
`!has tcluster.io/memory-limit-required`: it waits, its pending reason naming the
constraint, until a node that allows it comes. Master and agents in one process, fake runtime."""

from __future__ import annotations

from pathlib import Path

from tcluster.v1 import jobs_pb2
from tests.component.harness import Harness, run


def _done(job: jobs_pb2.Job) -> bool:
    return job.state in (jobs_pb2.JOB_SUCCEEDED, jobs_pb2.JOB_FAILED, jobs_pb2.JOB_CANCELLED)


def test_a_job_without_a_memory_limit_waits_for_a_node_that_allows_it(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        await h.add_agent("strict", unlimited_memory=False)
        unlimited_id = (await h.submit(["true"], memory=0)).id
        limited = await h.wait_job((await h.submit(["true"], memory=2**26)).id, _done)
        assert limited.state == jobs_pb2.JOB_SUCCEEDED and limited.tasks[0].node == "strict"
        waiting = await h.wait_job(unlimited_id, lambda j: "memory-limit-required" in j.pending_reason)
        assert waiting.state == jobs_pb2.JOB_PENDING, waiting
        assert "!has tcluster.io/memory-limit-required" in waiting.pending_reason
        await h.add_agent("open")
        unlimited = await h.wait_job(unlimited_id, _done)
        assert unlimited.state == jobs_pb2.JOB_SUCCEEDED and unlimited.tasks[0].node == "open", unlimited
    run(scenario, tmp_path)


def test_by_default_a_task_without_a_memory_limit_runs(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        await h.add_agent("n1")
        job = await h.wait_job((await h.submit(["true"], memory=0)).id, _done)
        assert job.state == jobs_pb2.JOB_SUCCEEDED
    run(scenario, tmp_path)
