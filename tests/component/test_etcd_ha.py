"""Masters on a real etcd, in process: one leads, the other answers as a standby and takes
over when the leader's lease ends; a master whose leader key is gone writes nothing and
sends nothing; large batches are split within etcd's limits and load back whole."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import grpc
import pytest

from tcluster.etcd.kv import EtcdKV, put
from tcluster.master.app.server import RunningMaster, start_master
from tcluster.master.settings import MasterSettings
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc
from testkit.etcd_single import SingleEtcd, single_etcd  # noqa: F401  (the fixture)

WAIT_S = 15.0


def settings(tmp: Path, member: SingleEtcd, prefix: str, name: str, **extra: object) -> MasterSettings:
    return MasterSettings(listen="127.0.0.1:0", data_dir=tmp / name, store=member.url, store_prefix=prefix,
                          lease_ttl_s=2, heartbeat_interval_s=0.2, schedule_interval_s=0.2, **extra)


def spec(tasks: int = 1) -> jobs_pb2.JobSpec:
    s = jobs_pb2.JobSpec(command=["true"], tasks=tasks)
    s.resources.cpu, s.resources.memory = 1, 2**20
    return s


async def submit(master: RunningMaster, tasks: int = 1) -> jobs_pb2.Job:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{master.port}") as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        return await stub.Submit(jobs_pb2.SubmitRequest(spec=spec(tasks)), timeout=10)


async def get(master: RunningMaster, job_id: str) -> jobs_pb2.Job:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{master.port}") as channel:
        return await jobs_pb2_grpc.JobServiceStub(channel).Get(jobs_pb2.GetJobRequest(id=job_id), timeout=10)


def test_standby_points_at_the_leader_and_takes_over_when_its_lease_ends(tmp_path: Path,
                                                                       single_etcd: SingleEtcd) -> None:
    prefix = f"/ha-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        lost: list[str] = []
        a = await start_master(settings(tmp_path, single_etcd, prefix, "a"), lost.append)
        await asyncio.wait_for(a.leading.wait(), WAIT_S)
        b = await start_master(settings(tmp_path, single_etcd, prefix, "b"), lost.append)
        try:
            job = await submit(a, tasks=3)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await submit(b)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert f"the leader is at 127.0.0.1:{a.port}" in (refused.value.details() or "")
            assert ("tcl-leader", f"127.0.0.1:{a.port}") in tuple(refused.value.trailing_metadata() or ())
            await a.stop(grace_s=0, resign=False)      # a crash: the lease is left to expire
            await asyncio.wait_for(b.leading.wait(), WAIT_S)
            seen = await get(b, job.id)
            assert seen.id == job.id and len(seen.tasks) == 3
            assert lost == []
        finally:
            await b.stop(grace_s=0)
    asyncio.run(body())


def test_a_master_whose_leader_key_is_gone_writes_and_sends_nothing(tmp_path: Path, single_etcd: SingleEtcd) -> None:
    prefix = f"/ha-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        lost: list[str] = []
        a = await start_master(settings(tmp_path, single_etcd, prefix, "a"), lost.append)
        kv = EtcdKV([single_etcd.endpoint])
        try:
            await asyncio.wait_for(a.leading.wait(), WAIT_S)
            before = await kv.range_prefix(prefix + "/state/jobs/")
            # Another master took over meanwhile (its key replaces ours).
            await kv.txn([], [put(prefix + "/leader", b'{"id":"x","client":"h:1","agent":"h:2"}')])
            for _ in range(100):
                if lost:
                    break
                await asyncio.sleep(0.02)
            assert lost and "another master leads" in lost[0]
            assert a.service is not None and not a.service.acting()
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await submit(a)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            after = await kv.range_prefix(prefix + "/state/jobs/")
            assert after[0] == before[0]           # nothing was written
        finally:
            await kv.close()
            await a.stop(grace_s=0, resign=False)
    asyncio.run(body())


def test_a_paused_leader_past_its_deadline_acts_on_nothing(tmp_path: Path, single_etcd: SingleEtcd) -> None:
    """The local lease deadline: no answer from etcd is needed to stop acting."""
    prefix = f"/ha-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        lost: list[str] = []
        a = await start_master(settings(tmp_path, single_etcd, prefix, "a"), lost.append)
        try:
            await asyncio.wait_for(a.leading.wait(), WAIT_S)
            assert a.election is not None
            leadership = a.election.leadership
            clock = leadership.monotonic
            leadership.monotonic = lambda: clock() + 60.0     # as if the process had been stopped a minute
            assert not leadership.leading() and a.service is not None and not a.service.acting()
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await submit(a)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        finally:
            await a.stop(grace_s=0, resign=False)
    asyncio.run(body())


def test_a_job_larger_than_one_transaction_is_written_in_order_and_loads_whole(tmp_path: Path,
                                                                               single_etcd: SingleEtcd) -> None:
    prefix = f"/ha-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        a = await start_master(settings(tmp_path, single_etcd, prefix, "a", store_max_txn_ops=8))
        await asyncio.wait_for(a.leading.wait(), WAIT_S)
        job = await submit(a, tasks=50)
        small = await submit(a, tasks=2)
        await a.stop(grace_s=0)
        kv = EtcdKV([single_etcd.endpoint])
        try:   # an orphan task (a crash between a job's chunks) is ignored on load
            await kv.txn([], [put(prefix + "/state/tasks/deadbeef/000000", b'["PENDING","",0,null,0,"",0,0,"",0]')])
        finally:
            await kv.close()
        b = await start_master(settings(tmp_path, single_etcd, prefix, "b"))
        try:
            await asyncio.wait_for(b.leading.wait(), WAIT_S)
            assert len((await get(b, job.id)).tasks) == 50
            assert len((await get(b, small.id)).tasks) == 2
            assert b.service is not None and set(b.service.state.jobs) == {job.id, small.id}
        finally:
            await b.stop(grace_s=0)
    asyncio.run(body())


def test_arrays_and_dependencies_survive_a_failover(tmp_path: Path, single_etcd: SingleEtcd) -> None:
    """An array's ranges, throttle and `tcl hold`, a pending job's updated spec, and a job held
    on another, are state in etcd: the
    master that takes over has them, and resolves the dependency on the predecessor's end."""
    prefix = f"/ha-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        a = await start_master(settings(tmp_path, single_etcd, prefix, "a"), [].append)
        await asyncio.wait_for(a.leading.wait(), WAIT_S)
        b = await start_master(settings(tmp_path, single_etcd, prefix, "b"), [].append)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{a.port}") as channel:
                stub = jobs_pb2_grpc.JobServiceStub(channel)
                array_spec = spec()
                array_spec.array = "0-99999%7"
                array = await stub.Submit(jobs_pb2.SubmitRequest(spec=array_spec), timeout=10)
                first = await stub.Submit(jobs_pb2.SubmitRequest(spec=spec()), timeout=10)
                held_spec = spec()
                held_spec.dependency = f"afterok:{first.id}"
                held = await stub.Submit(jobs_pb2.SubmitRequest(spec=held_spec), timeout=10)
                await stub.Hold(jobs_pb2.HoldJobRequest(id=array.id), timeout=10)            # `tcl hold`
                await stub.Update(jobs_pb2.UpdateJobRequest(id=first.id, cpu=0.25), timeout=10)   # `tcl update`
            await a.stop(grace_s=0, resign=False)
            await asyncio.wait_for(b.leading.wait(), WAIT_S)
            seen = await get(b, array.id)
            assert (seen.unplaced, seen.throttle, seen.spec.tasks, len(seen.tasks)) == ("0-99999", 7, 100000, 0)
            assert seen.held_by == "anonymous" and "held by anonymous" in seen.pending_reason
            assert (await get(b, first.id)).spec.resources.cpu == 0.25
            waiting = await get(b, held.id)
            assert "waiting for dependency" in waiting.pending_reason and not waiting.released
            async with grpc.aio.insecure_channel(f"127.0.0.1:{b.port}") as channel:
                await jobs_pb2_grpc.JobServiceStub(channel).Cancel(jobs_pb2.CancelJobRequest(id=first.id), timeout=10)
            for _ in range(100):
                ended = await get(b, held.id)
                if ended.reason:
                    break
                await asyncio.sleep(0.05)
            assert ended.reason == f"cancelled: dependency can no longer be met: afterok:{first.id} (CANCELLED)"
        finally:
            await b.stop(grace_s=0)
    asyncio.run(body())
