"""Issue 35: a GM's Place is applied once across LM restarts (master/features/fedrequests.py).
The answer to a Place is lost (the GM resends the same request id); meanwhile the task ran,
ended and its job left the master's memory, and the master restarted: the repeat still gets
the first job, and nothing starts again."""

from __future__ import annotations

from pathlib import Path

from tests.component.harness import Harness, run, wait_until
from tests.component.test_federation_lm import GIB, LM, _connected, layout, next_update, request, started_on, stub
from tcluster.master.core.pinning import FEDERATION_OWNER
from tcluster.master.features.fedrequests import candidate_ids
from tcluster.v1 import common_pb2


def test_a_repeat_after_the_job_left_memory_and_the_lm_restarted_gets_that_job_not_a_second(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master(**LM, resident_finished_jobs=0)
        await h.add_agent("n0", cpus=4, memory=8 * GIB)
        stream, lay, _ = await layout(h)
        first = await stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 0))     # its answer "lost"
        job_id = first.launched.job_id
        assert job_id == next(candidate_ids("f0-1.0:0"))          # derived from the request id
        await h.wait_job(job_id, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
        h.agents["n0"].runtime.finish(h.agents["n0"].runtime.started[0].key, 0)
        await next_update(stream, "ended")
        service = h.master.service
        await wait_until(lambda: _gone(service, job_id))
        stream.cancel()
        await h.stop_master()                  # the LM's in-memory request list is gone with it
        await h.start_master(**LM, resident_finished_jobs=0)
        await wait_until(lambda: _connected(h, 1))
        assert job_id not in h.master.service.state.jobs
        again = await stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 0))   # the old epoch, even
        assert again.WhichOneof("outcome") == "launched" and again.launched.job_id == job_id
        assert started_on(h, "n0") == 1 and h.master.service.state.pending_jobs == set()
    run(scenario, tmp_path)


async def _gone(service: object, job_id: str) -> bool:
    return job_id not in service.state.jobs and \
        (FEDERATION_OWNER, "f0-1.0:0") not in service.state.by_request      # type: ignore[attr-defined]
