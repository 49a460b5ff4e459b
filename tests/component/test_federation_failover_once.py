"""Issue 35: a GM's Place is applied once across an LM FAILOVER between the Place and its
answer. One LM is two masters on a real etcd (one leads, the other stands by) with one
fake-runtime agent that follows the leader. The GM's answers are "lost": one task is running
when the leader is killed (no resignation, its lease left to expire), another ran, ended
and left the leader's memory before. The GM resends both request ids to the new leader: each
gets its first job (the same id), and no task starts a second time."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import grpc

from tests.component.harness import Harness, wait_until
from tests.component.test_etcd_ha import WAIT_S, settings
from tests.component.test_federation_lm import GIB, LM, layout, next_update, request, started_on, stub
from tcluster.master.app.server import start_master
from tcluster.master.features.fedrequests import candidate_ids
from tcluster.v1 import common_pb2
from testkit.etcd_single import SingleEtcd, single_etcd  # noqa: F401  (the fixture)


def test_a_place_resent_to_the_new_leader_after_a_failover_runs_its_task_once(tmp_path: Path,
                                                                            single_etcd: SingleEtcd) -> None:
    prefix = f"/fed-failover-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        lm = dict(LM, resident_finished_jobs=0)
        a = await start_master(settings(tmp_path, single_etcd, prefix, "a", **lm), [].append)
        await asyncio.wait_for(a.leading.wait(), WAIT_S)
        b = await start_master(settings(tmp_path, single_etcd, prefix, "b", **lm), [].append)
        h = Harness(tmp_path)
        h.master, h.channel = a, grpc.aio.insecure_channel(f"127.0.0.1:{a.port}")
        try:
            await h.add_agent("n0", cpus=4, memory=8 * GIB, master=f"127.0.0.1:{a.port},127.0.0.1:{b.port}")
            stream, lay, _ = await layout(h)
            ended = await stub(h).Place(request("f0-1.0:0", "f0-1.0", 0, lay.epoch, 0))     # answer "lost"
            ended_job = ended.launched.job_id
            await h.wait_job(ended_job, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
            h.agents["n0"].runtime.finish(h.agents["n0"].runtime.started[0].key, 0)
            await next_update(stream, "ended")
            await wait_until(lambda: _gone(a, ended_job))        # out of the leader's memory
            running = await stub(h).Place(request("f0-2.0:0", "f0-2.0", 0, lay.epoch, 0))   # answer "lost"
            running_job = running.launched.job_id
            assert running_job == next(candidate_ids("f0-2.0:0"))
            await h.wait_job(running_job, lambda j: j.tasks and j.tasks[0].state == common_pb2.TASK_RUNNING)
            assert started_on(h, "n0") == 2
            stream.cancel()
            await h.channel.close()
            await a.stop(grace_s=0, resign=False)               # a crash: the lease is left to expire
            await asyncio.wait_for(b.leading.wait(), WAIT_S)
            h.master, h.channel = b, grpc.aio.insecure_channel(f"127.0.0.1:{b.port}")
            await wait_until(lambda: _ready(h))                  # the agent found the new leader
            for rid, task, job_id in (("f0-1.0:0", "f0-1.0", ended_job), ("f0-2.0:0", "f0-2.0", running_job)):
                again = await stub(h).Place(request(rid, task, 0, lay.epoch, 0))    # the old epoch, even
                assert again.WhichOneof("outcome") == "launched" and again.launched.job_id == job_id, again
            assert started_on(h, "n0") == 2                      # neither started again
            assert b.service.state.pending_jobs == set()
            job = await h.job(running_job)
            assert job.tasks[0].state == common_pb2.TASK_RUNNING
        finally:
            for agent in h.agents.values():
                agent.task.cancel()
            if h.channel is not None:
                await h.channel.close()
            await b.stop(grace_s=0)
    asyncio.run(body())


async def _gone(master: object, job_id: str) -> bool:
    return job_id not in master.service.state.jobs      # type: ignore[attr-defined]


async def _ready(h: Harness) -> bool:
    from tcluster.v1 import jobs_pb2
    try:
        nodes = (await h.cluster.ListNodes(jobs_pb2.ListNodesRequest(), timeout=5)).nodes
    except grpc.aio.AioRpcError:
        return False
    return any(n.state == "READY" for n in nodes)
