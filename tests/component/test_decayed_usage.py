"""--usage-half-life through the live master: the decayed usage accrues while tasks run,
shows in ListQueues and /metrics' source rows, and survives a master restart (the
AccrueUsage record in the store)."""

from __future__ import annotations

from pathlib import Path

import grpc

from tcluster.v1 import jobs_pb2
from tests.component.harness import Harness, run, wait_until

GiB = 2**30
QUEUES = "queues:\n  lab: {weight: 1}\n  idle: {weight: 1}\n"


async def usage(h: Harness) -> dict[str, float]:
    reply = await h.cluster.ListQueues(jobs_pb2.ListQueuesRequest())
    return {q.path: q.decayed_usage_s for q in reply.queues if q.path}


async def leader_usage(h: Harness) -> dict[str, float] | None:
    """usage(), or None while the master answers as a standby: on etcd with its 2 s lease, a
    master starved of CPU (a hog beside the suite) may step down and win again meanwhile."""
    try:
        return await usage(h)
    except grpc.aio.AioRpcError as e:
        if e.code() != grpc.StatusCode.UNAVAILABLE:
            raise
        return None



def test_decayed_usage_accrues_and_survives_a_restart(tmp_path: Path, store: str) -> None:
    (tmp_path / "queues.yaml").write_text(QUEUES)

    async def scenario(h: Harness) -> None:
        await h.start_master(queues_file=tmp_path / "queues.yaml", usage_half_life_s=100.0)
        await h.add_agent("n1", cpus=2, memory=4 * GiB)
        spec = jobs_pb2.JobSpec(command=["sleep"], tasks=2, queue="lab")
        spec.resources.cpu, spec.resources.memory = 1, GiB // 8
        await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec))

        async def accrued() -> dict[str, float] | None:
            now = await leader_usage(h)
            return now if now and now["lab"] >= 2.0 else None   # the whole cluster for 2 s at least
        before = await wait_until(accrued, timeout_s=30)
        assert isinstance(before, dict) and before["idle"] == 0.0
        assert before["lab/anonymous"] == before["lab"]      # its one user (no tokens: anonymous)
        await h.stop_master()
        await h.start_master(queues_file=tmp_path / "queues.yaml", usage_half_life_s=100.0)
        after = await wait_until(lambda: leader_usage(h))
        assert isinstance(after, dict)
        # Loaded from the store, not restarted from zero (100 s half-life: a few seconds barely decay it).
        assert after["lab"] >= 0.9 * before["lab"] and after["idle"] == 0.0

    run(scenario, tmp_path)


def test_without_a_half_life_there_is_no_usage(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        await h.add_agent("n1", cpus=1, memory=2 * GiB)
        job = await h.submit(["sleep"])
        await h.wait_job(job.id, lambda j: j.tasks[0].state == 3)
        assert set((await usage(h)).values()) == {0.0}

    run(scenario, tmp_path)
