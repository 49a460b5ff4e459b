"""tcl-gm against a real master as its LM (in-process, FakeRuntime agents): tasks placed
through the live LocalManagerService run as the master's pinned jobs; and the ends a GM
missed while it was down are found on its return (the LM's full state no longer lists
the task; the GM reads the LM master's job), so its job ends instead of staying RUNNING."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.component.harness import Harness, run, wait_until
from tcluster.gm.daemon import GMDaemon
from tcluster.gm.settings import settings_from
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _gm(h: Harness, tmp: Path, port: int) -> GMDaemon:
    gm = GMDaemon(settings_from(dict(name="gm0", index=0, listen=f"127.0.0.1:{port}", state_dir=str(tmp / "gm0"),
                                     lms=f"lm0={h.address}", gms=f"gm0=127.0.0.1:{port}", queue_map="a=gm0")))
    await gm.start()
    return gm


async def _fed_job(gm: GMDaemon, port: int, job_id: str) -> fpb.FedJob:
    stub = federation_pb2_grpc.GlobalManagerServiceStub(gm.channel(f"127.0.0.1:{port}"))
    return await stub.Get(fpb.FedGetRequest(id=job_id), timeout=10)


def test_a_gm_down_while_its_tasks_end_records_their_ends_when_it_returns(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master(federation_lm_id=0, federation_gms=1, federation_state_interval_s=0.3)
        agent = await h.add_agent("n1", cpus=8)
        port = _free_port()
        gm = await _gm(h, tmp_path, port)
        stub = federation_pb2_grpc.GlobalManagerServiceStub(gm.channel(f"127.0.0.1:{port}"))
        spec = jobs_pb2.JobSpec(queue="a", tasks=4, command=["sleep"], resources=common_pb2.Resources(cpu=1, memory=2**28))
        job_id = (await stub.Submit(fpb.FedSubmitRequest(spec=spec), timeout=10)).id

        async def all_running() -> bool:
            return [t.state for t in (await _fed_job(gm, port, job_id)).tasks] == ["RUNNING"] * 4
        await wait_until(all_running)
        listed = await h.jobs.List(jobs_pb2.ListJobsRequest(all=True))
        assert len([j for j in listed.jobs if j.spec.labels.get("tcluster.io/federation-task", "")
                    .startswith(job_id)]) == 4                     # one pinned job per task at the LM
        await gm.stop()                                            # the GM is down ...
        for key in agent.runtime.running_keys():                   # ... while every task ends
            agent.runtime.finish(key, 0)

        async def lm_jobs_done() -> bool:
            jobs = (await h.jobs.List(jobs_pb2.ListJobsRequest(all=True))).jobs
            return all(j.state == jobs_pb2.JOB_SUCCEEDED for j in jobs) and len(jobs) == 4
        await wait_until(lm_jobs_done)
        gm = await _gm(h, tmp_path, port)                          # back on the same state dir
        try:
            async def ended() -> bool:
                return (await _fed_job(gm, port, job_id)).state == "SUCCEEDED"
            await wait_until(ended)
            job = await _fed_job(gm, port, job_id)
            assert [(t.state, t.exit_code) for t in job.tasks] == [("SUCCEEDED", 0)] * 4
        finally:
            await gm.stop()
    run(scenario, tmp_path)
