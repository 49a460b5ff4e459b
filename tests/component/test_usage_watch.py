"""Fresh usage samples on demand (issue 26, master/usagewatch.py): an agent with a long usage
interval sends nothing while its task's usage moves steadily (rate under the threshold), until
someone watches — `tcl top`'s List, a Get that asks for one job, a /metrics scrape naming the
node — then reports every heartbeat for the watch, and goes quiet again after it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest
from aiohttp.test_utils import TestClient, TestServer

from tcluster.agent.runtime.base import RawUsage
from tcluster.v1 import common_pb2, jobs_pb2
from tests.component.harness import Harness, run, wait_until

MiB = 2**20


async def _feed(h: Harness, stop: asyncio.Event) -> None:
    """A steady 0.5 cores: CPU seconds grow, the rate (what the threshold looks at) does not."""
    runtime = h.agents["n1"].runtime
    started = time.monotonic()
    while not stop.is_set():
        seconds = time.monotonic() - started
        for key in runtime.running_keys():
            runtime.set_usage(key, RawUsage(at=time.time(), mono=1000.0 + seconds, cpu_ns=int(seconds * 0.5e9),
                                            memory_bytes=100 * MiB, pids=1))
        await asyncio.sleep(0.05)


async def _cpu_seconds(h: Harness, job_id: str) -> float:
    job = await h.jobs.Get(jobs_pb2.GetJobRequest(id=job_id))
    return job.tasks[0].usage.cpu_seconds


async def _quiet_for(h: Harness, job_id: str, seconds: float) -> float:
    """The master's figure does not move for `seconds` (no report came); returns it."""
    before = await _cpu_seconds(h, job_id)
    await asyncio.sleep(seconds)
    assert await _cpu_seconds(h, job_id) == before, "a report came without a watch"
    return before


async def _moves(h: Harness, job_id: str, after: float) -> None:
    async def moved() -> bool:
        return await _cpu_seconds(h, job_id) > after
    await wait_until(moved, timeout_s=5.0)


def test_a_watch_brings_fresh_samples_for_its_length_then_the_node_is_quiet_again(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master(http="127.0.0.1:0")
        agent = await h.add_agent("n1", usage_interval_s=30.0)
        job = await h.submit(["sleep", "1000"], cpu=1, memory=256 * MiB)
        await h.wait_job(job.id, lambda j: j.tasks[0].state == common_pb2.TASK_RUNNING)
        stop = asyncio.Event()
        feeder = asyncio.create_task(_feed(h, stop))
        try:
            await asyncio.sleep(1.0)                         # the first reports after the start are out
            last = await _quiet_for(h, job.id, 1.5)          # 7 heartbeats, no report: the interval is 30 s
            # tcl top: List with a watch -> a report every heartbeat for its length (1 s here)
            await h.jobs.List(jobs_pb2.ListJobsRequest(watch_usage_s=1.0))
            await _moves(h, job.id, last)
            assert agent.agent._report_interval_s() == 0.2
            await asyncio.sleep(1.2)                         # the watch ended: quiet again
            assert agent.agent._report_interval_s() == 30.0
            last = await _quiet_for(h, job.id, 1.0)
            # a client following one job: Get with a watch
            await h.jobs.Get(jobs_pb2.GetJobRequest(id=job.id, watch_usage_s=1.0))
            await _moves(h, job.id, last)
            await asyncio.sleep(1.2)
            last = await _quiet_for(h, job.id, 1.0)
            # a Prometheus scrape naming the node (its watch is 30 s)
            client = TestClient(TestServer(h.master.dashboard.app()))
            await client.start_server()
            try:
                assert (await client.get("/metrics", params={"node": "n1"})).status == 200
            finally:
                await client.close()
            await _moves(h, job.id, last)
        finally:
            stop.set()
            await feeder
    run(scenario, tmp_path)


def test_a_bad_watch_length_is_refused_naming_the_field(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        for request in (jobs_pb2.ListJobsRequest(watch_usage_s=-1), jobs_pb2.ListJobsRequest(watch_usage_s=float("nan"))):
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await h.jobs.List(request)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "watch_usage_s" in error.value.details() and "seconds >= 0" in error.value.details()
    run(scenario, tmp_path)
