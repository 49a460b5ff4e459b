"""Bad input changes nothing, on either store, and no user's bad change fails another's:
the review's attack (review-security-e14fa7a, finding 2) through a real master (in process,
127.0.0.1 port 0) on a real etcd and on SQLite.

Forty concurrent ordinary submits, one of them with 0.9 MB of '"' in its environment
(within the 1 MiB string bound, 1.8 MB as stored JSON, past etcd's 1.5 MiB requests):
that one is refused INVALID_ARGUMENT naming the field, the other 39 are made, and the
store holds exactly the jobs that were acknowledged, also after a restart. And where etcd
itself refuses what the master sent (an etcd run with a smaller --max-request-bytes), the
refused submit fails alone, and `tcl`'s client, resending by request id what it was told
to send again, ends with each submit made exactly once."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from tcluster.cli.client import MasterClient
from tcluster.master.app.server import RunningMaster, start_master
from tcluster.master.settings import MasterSettings
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc
from testkit.etcd_single import ETCD, SingleEtcd, single_etcd, start_single_etcd, stop_single_etcd  # noqa: F401

WAIT_S = 20.0
ORDINARY = 39


def spec(env: dict[str, str] | None = None, request_id: str = "") -> jobs_pb2.JobSpec:
    s = jobs_pb2.JobSpec(command=["true"], tasks=1, request_id=request_id)
    s.resources.cpu, s.resources.memory = 1, 2**20
    s.env.update(env or {})
    return s


async def start(tmp: Path, store: str, prefix: str, name: str = "m") -> RunningMaster:
    settings = MasterSettings(listen="127.0.0.1:0", data_dir=tmp / name, store=store, store_prefix=prefix,
                              lease_ttl_s=2, heartbeat_interval_s=0.2, schedule_interval_s=0.2)
    master = await start_master(settings)
    if master.election is not None:
        await asyncio.wait_for(master.leading.wait(), WAIT_S)
    return master


async def listed(master: RunningMaster) -> list[str]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{master.port}") as channel:
        reply = await jobs_pb2_grpc.JobServiceStub(channel).List(jobs_pb2.ListJobsRequest(all=True), timeout=10)
        return [j.id for j in reply.jobs]


async def submit_all(master: RunningMaster, specs: list[jobs_pb2.JobSpec]) -> list[jobs_pb2.Job | grpc.aio.AioRpcError]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{master.port}") as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        return await asyncio.gather(*(stub.Submit(jobs_pb2.SubmitRequest(spec=s), timeout=30) for s in specs),
                                    return_exceptions=True)


@pytest.fixture(params=["sqlite", "etcd"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'master.db'}"
    member: SingleEtcd = request.getfixturevalue("single_etcd")
    return member.url


def test_one_oversized_spec_among_concurrent_submits_fails_alone(tmp_path: Path, store_url: str) -> None:
    prefix = f"/limits-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        master = await start(tmp_path, store_url, prefix)
        try:
            specs = [spec() for _ in range(ORDINARY)]
            specs.insert(ORDINARY // 2, spec({"BLOB": '"' * 900_000}))
            results = await submit_all(master, specs)
            big = results.pop(ORDINARY // 2)
            assert isinstance(big, grpc.aio.AioRpcError) and big.code() == grpc.StatusCode.INVALID_ARGUMENT
            details = big.details() or ""
            assert details.startswith("env: encodes to 1.80 MB") and "at most 1.40 MB per job record" in details
            assert len(details) < 400                              # nothing of the 0.9 MB quoted back
            acknowledged = {r.id for r in results if isinstance(r, jobs_pb2.Job)}
            assert len(acknowledged) == ORDINARY, [r for r in results if not isinstance(r, jobs_pb2.Job)][:3]
            assert set(await listed(master)) == acknowledged
        finally:
            await master.stop(grace_s=0)
        again = await start(tmp_path, store_url, prefix, "again")   # what the store holds, read back
        try:
            assert set(await listed(again)) == acknowledged
        finally:
            await again.stop(grace_s=0)
    asyncio.run(body())


@pytest.fixture
def small_etcd(tmp_path: Path) -> Iterator[SingleEtcd]:
    """An etcd that refuses requests above 300 kB: less than the master plans for."""
    if not ETCD.exists():
        pytest.skip(f"{ETCD} is missing (Debian: apt-get install etcd-server)")
    (tmp_path / "small-etcd").mkdir()
    member, popen = start_single_etcd(tmp_path / "small-etcd", extra=("--max-request-bytes", "300000"))
    try:
        yield member
    finally:
        stop_single_etcd(popen)


def test_a_submit_etcd_refuses_fails_alone_and_the_others_are_made_once(tmp_path: Path,
                                                                        small_etcd: SingleEtcd) -> None:
    prefix = f"/refused-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        master = await start(tmp_path, small_etcd.url, prefix)
        client = MasterClient(f"127.0.0.1:{master.port}", wait_leader_s=30)
        ids = [uuid.uuid4().hex for _ in range(20)]
        try:
            with ThreadPoolExecutor(8) as pool:     # tcl's own client: resends what it was told to send again
                made = [asyncio.wrap_future(pool.submit(client.submit, spec(request_id=i))) for i in ids]
                results = await asyncio.gather(submit_all(master, [spec({"BLOB": "x" * 500_000})]), *made)
            (big,) = results[0]
            assert isinstance(big, grpc.aio.AioRpcError) and big.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "request is too large" in (big.details() or "") and len(big.details() or "") < 400
            jobs = {job.spec.request_id: job.id for job in results[1:]}
            assert set(jobs) == set(ids) and len(set(jobs.values())) == len(ids)
            assert sorted(await listed(master)) == sorted(jobs.values())    # each made once, nothing else
            assert master.service is not None and master.service.acting()  # still the leader
        finally:
            client.__exit__()
            await master.stop(grace_s=0)
    asyncio.run(body())
