"""In-process master + agents on 127.0.0.1 port 0 with the fake runtime."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import grpc

from tcluster.agent.daemon import Agent
from tcluster.agent.gpudetect import GpuInventory
from testkit.fake_runtime import FakeRuntime
from testkit.patience import patient
from tcluster.agent.settings import AgentSettings
from tcluster.master.app.server import RunningMaster, start_master
from tcluster.master.settings import MasterSettings
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc

# Upper bounds only (a wait ends when its condition holds): generous, so that a loaded host
# (a CPU hog beside the suite) cannot fail a correct run; stretched further by patience.py.
WAIT_S = patient(30.0)
# Set by a store-parametrized module's fixture (see test_master_agents.py): the master
# starts on this store instead of SQLite in its data dir.
STORE: dict[str, str] = {"url": "", "prefix": "/tcluster"}


@dataclass
class RunningAgent:
    agent: Agent
    runtime: FakeRuntime
    task: asyncio.Task[None]


class MasterStubs:
    """The master's two client services over `self.channel` (aio or not)."""

    channel: Any

    @property
    def jobs(self) -> jobs_pb2_grpc.JobServiceStub:
        return jobs_pb2_grpc.JobServiceStub(self.channel)

    @property
    def cluster(self) -> jobs_pb2_grpc.ClusterServiceStub:
        return jobs_pb2_grpc.ClusterServiceStub(self.channel)


@dataclass
class Harness(MasterStubs):
    tmp: Path
    master: RunningMaster | None = None
    agents: dict[str, RunningAgent] = field(default_factory=dict)
    channel: grpc.aio.Channel | None = None
    settings: MasterSettings | None = None

    @property
    def address(self) -> str:
        assert self.master is not None
        return f"127.0.0.1:{self.master.port}"

    async def start_master(self, **overrides: object) -> None:
        base = dict(listen="127.0.0.1:0", data_dir=self.tmp / "master", heartbeat_interval_s=0.2,
                    schedule_interval_s=0.2)
        if self.settings is not None:  # a restart keeps the data dir and the port
            base.update(listen=self.address)
        if STORE["url"]:
            base.update(store=STORE["url"], store_prefix=STORE["prefix"], lease_ttl_s=2)
        self.settings = MasterSettings(**{**base, **overrides})
        self.master = await start_master(self.settings)
        if self.master.election is not None:     # etcd: serving as a standby until it wins
            await asyncio.wait_for(self.master.leading.wait(), WAIT_S)
        self.channel = grpc.aio.insecure_channel(self.address)

    async def add_agent(self, name: str, cpus: float = 4, memory: int = 8 * 2**30, wait: bool = True,
                        labels: dict[str, str] | None = None, gpus: GpuInventory = GpuInventory(),
                        **overrides: object) -> RunningAgent:
        base = dict(master=self.address, node=name, cpus=cpus, memory_bytes=memory, labels=labels or {},
                    state_dir=self.tmp / "agents" / name, heartbeat_interval_s=0.2, reconnect_max_s=0.5,
                    kill_grace_s=0.5)
        settings = AgentSettings(**{**base, **overrides})
        runtime = FakeRuntime()
        agent = Agent(settings, runtime, gpus)
        running = RunningAgent(agent, runtime, asyncio.create_task(agent.run()))
        self.agents[name] = running
        if wait:
            await asyncio.wait_for(agent.registered.wait(), WAIT_S)
        return running

    async def stop_master(self) -> None:
        assert self.master is not None and self.channel is not None
        await self.channel.close()
        await self.master.stop(grace_s=0)

    async def stop(self) -> None:
        for running in self.agents.values():
            running.task.cancel()
        if self.master is not None:
            await self.stop_master()

    async def submit(self, command: list[str], cpu: float = 1, memory: int = 2**30, tasks: int = 1,
                     constraints: list[str] | None = None, request_id: str = "", gpus: int = 0) -> jobs_pb2.Job:
        spec = jobs_pb2.JobSpec(command=command, tasks=tasks, constraints=constraints or [], request_id=request_id)
        spec.resources.cpu, spec.resources.memory = cpu, memory
        if gpus:
            spec.resources.other["gpu"] = gpus
        return await self.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec))

    async def job(self, job_id: str) -> jobs_pb2.Job:
        return await self.jobs.Get(jobs_pb2.GetJobRequest(id=job_id))

    async def wait_job(self, job_id: str, predicate: Callable[[jobs_pb2.Job], bool]) -> jobs_pb2.Job:
        async def check() -> jobs_pb2.Job | None:
            job = await self.job(job_id)
            return job if predicate(job) else None
        return await wait_until(check)


async def wait_until(check: Callable[[], Awaitable[object]], timeout_s: float = WAIT_S) -> object:
    """Polls `check` until it returns something truthy; fails after a bounded time."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        result = await check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        await asyncio.sleep(0.02)


def run(scenario: Callable[[Harness], Awaitable[None]], tmp: Path) -> None:
    async def main() -> None:
        harness = Harness(tmp)
        try:
            await scenario(harness)
        finally:
            await harness.stop()
    asyncio.run(main())
