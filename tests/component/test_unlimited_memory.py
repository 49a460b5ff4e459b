"""Issue 34: `tcl submit --mem unlimited` (memory 0 on the wire) runs where the agent allows
it, and fails at start naming the flag where `tcl-agent --no-unlimited-memory` forbids it.
Master and agents in one process, fake runtime."""

from __future__ import annotations

from pathlib import Path

from tcluster.v1 import jobs_pb2
from tests.component.harness import Harness, run


def _done(job: jobs_pb2.Job) -> bool:
    return job.state in (jobs_pb2.JOB_SUCCEEDED, jobs_pb2.JOB_FAILED, jobs_pb2.JOB_CANCELLED)


def test_an_agent_may_refuse_tasks_without_a_memory_limit(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        await h.add_agent("strict", unlimited_memory=False)
        unlimited = await h.wait_job((await h.submit(["true"], memory=0)).id, _done)
        limited = await h.wait_job((await h.submit(["true"], memory=2**26)).id, _done)
        assert limited.state == jobs_pb2.JOB_SUCCEEDED
        assert unlimited.state == jobs_pb2.JOB_FAILED
        assert "no task without a memory limit (tcl-agent --no-unlimited-memory)" in unlimited.tasks[0].reason
        assert "--mem SIZE" in unlimited.tasks[0].reason
    run(scenario, tmp_path)


def test_by_default_a_task_without_a_memory_limit_runs(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        await h.add_agent("n1")
        job = await h.wait_job((await h.submit(["true"], memory=0)).id, _done)
        assert job.state == jobs_pb2.JOB_SUCCEEDED
    run(scenario, tmp_path)
