"""Megha's Alg. 2 live (issue 25): tcl-gm --preemption against a real master as its LM
(in-process, FakeRuntime agent). Queue a fills the cluster with long tasks; queue b then
gets its fair share by PreemptAndLaunch: a's victims are stopped through the master's
preemption path, go back to PENDING at their GM ("preempted by <task> of queue b"),
and run again, once each, when b's tasks leave room. Without --preemption b waits."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.component.harness import Harness, run, wait_until
from tcluster.gm.daemon import GMDaemon
from tcluster.gm.settings import settings_from
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2

FED_TASK = "tcluster.io/federation-task"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _gm(h: Harness, tmp: Path, port: int, preemption: bool) -> GMDaemon:
    gm = GMDaemon(settings_from(dict(name="gm0", index=0, listen=f"127.0.0.1:{port}", state_dir=str(tmp / "gm0"),
                                     lms=f"lm0={h.address}", gms=f"gm0=127.0.0.1:{port}", queue_map="a=gm0,b=gm0",
                                     preemption=preemption)))
    await gm.start()
    return gm


def _spec(queue: str, tasks: int) -> jobs_pb2.JobSpec:
    return jobs_pb2.JobSpec(queue=queue, tasks=tasks, command=["sleep", "1000"],
                            resources=common_pb2.Resources(cpu=1, memory=2**28))


async def _scenario(h: Harness, tmp: Path, preemption: bool) -> None:
    await h.start_master(federation_lm_id=0, federation_gms=1, federation_state_interval_s=0.3,
                         preempt_grace_s=0.2)
    agent = await h.add_agent("n1", cpus=4)
    port = _free_port()
    gm = await _gm(h, tmp, port, preemption)
    stub = federation_pb2_grpc.GlobalManagerServiceStub(gm.channel(f"127.0.0.1:{port}"))

    async def job(job_id: str) -> fpb.FedJob:
        return await stub.Get(fpb.FedGetRequest(id=job_id), timeout=10)

    async def states(job_id: str) -> list[str]:
        return sorted(t.state for t in (await job(job_id)).tasks)

    try:
        a = (await stub.Submit(fpb.FedSubmitRequest(spec=_spec("a", 4)), timeout=10)).id
        await wait_until(lambda: _is(states(a), ["RUNNING"] * 4))          # a fills the cluster
        b = (await stub.Submit(fpb.FedSubmitRequest(spec=_spec("b", 2)), timeout=10)).id
        if not preemption:
            await wait_until(lambda: _is(states(b), ["PENDING"] * 2))
            assert gm.gm.stats.no_room > 0 and gm.gm.stats.preemptions == 0
            assert await states(a) == ["RUNNING"] * 4
            return
        # b's equal share (2 of 4 cores) by preemption; a, then over its share, waits.
        await wait_until(lambda: _is(states(b), ["RUNNING"] * 2))
        await wait_until(lambda: _is(states(a), ["PENDING"] * 2 + ["RUNNING"] * 2))
        assert gm.gm.stats.preemptions == 2 and gm.preempted == 2
        waiting = [t for t in (await job(a)).tasks if t.state == "PENDING"]
        assert all(t.preemptions == 1 and t.reason.startswith("preempted by " + b) and t.reason.endswith("of queue b")
                   for t in waiting), waiting

        async def b_started() -> bool:       # the GM says RUNNING once b's jobs are written; they start
            return len(agent.runtime.started) == 6    # when the victims' room is free: 4 of a, 2 of b
        await wait_until(b_started)
        assert len(agent.runtime.running_keys()) == 4                  # the victims stopped, nothing doubled
        lm_jobs = (await h.jobs.List(jobs_pb2.ListJobsRequest(all=True))).jobs
        killed = [j for j in lm_jobs if j.state == jobs_pb2.JOB_CANCELLED]
        assert len(killed) == 2 and all(j.tasks[0].reason.startswith("preempted by") for j in killed)
        # b's tasks end: a's preempted tasks run again, once each.
        b_jobs = {t.job_id for t in (await job(b)).tasks}
        for spec in agent.runtime.started:
            if spec.task_id.partition(".")[0] in b_jobs:
                agent.runtime.finish(spec.key, 0)
        await wait_until(lambda: _is(states(a), ["RUNNING"] * 4))
        assert await states(b) == ["SUCCEEDED"] * 2

        async def a_started_again() -> bool:
            return len(agent.runtime.started) == 8 and len(agent.runtime.running_keys()) == 4
        await wait_until(a_started_again)
        for key in agent.runtime.running_keys():
            agent.runtime.finish(key, 0)
        await wait_until(lambda: _is(states(a), ["SUCCEEDED"] * 4))
        starts: dict[str, int] = {}
        for j in (await h.jobs.List(jobs_pb2.ListJobsRequest(all=True))).jobs:
            fed = j.spec.labels.get(FED_TASK, "")
            starts[fed] = starts.get(fed, 0) + 1
        assert sorted(starts.values()) == [1, 1, 1, 1, 2, 2]          # b's 2, a's 2 + the 2 preempted twice
        assert [t.preemptions for t in (await job(a)).tasks].count(1) == 2
    finally:
        await gm.stop()


async def _is(coro, want: list[str]) -> bool:
    return await coro == want


def test_queue_b_gets_its_share_by_preempting_a_whose_tasks_run_again_later(tmp_path: Path) -> None:
    run(lambda h: _scenario(h, tmp_path, preemption=True), tmp_path)


def test_without_preemption_queue_b_waits(tmp_path: Path) -> None:
    run(lambda h: _scenario(h, tmp_path, preemption=False), tmp_path)
