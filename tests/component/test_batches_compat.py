"""Issue 26 on the wire, in one process on port 0: a round's launches for one agent in one
message, and both directions of compatibility with the previous version (an old agent with
this master; this agent with an old master), the old peer simulated by its message shapes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import AsyncIterator

import grpc

from tcluster.agent.daemon import Agent
from tcluster.agent.settings import AgentSettings
from tcluster.wire.channels import GRPC_OPTIONS
from tcluster.wire.features import AGENT_FEATURES
from tcluster.master.edge import grpc_api
from tcluster.v1 import agent_pb2, agent_pb2_grpc, common_pb2, jobs_pb2
from testkit.fake_runtime import FakeRuntime
from tests.component.harness import Harness, run, wait_until

GiB = 2**30


def _running(n: int):  # type: ignore[no-untyped-def]
    return lambda j: sum(t.state == common_pb2.TASK_RUNNING for t in j.tasks) == n


def spy_on_outbound(monkeypatch) -> list[agent_pb2.MasterMessage]:  # type: ignore[no-untyped-def]
    sent: list[agent_pb2.MasterMessage] = []
    real = grpc_api.outbound_to_pbs

    def recording(message):  # type: ignore[no-untyped-def]
        out = real(message)
        sent.extend(out)
        return out
    monkeypatch.setattr(grpc_api, "outbound_to_pbs", recording)
    return sent


def test_a_rounds_launches_for_one_agent_go_in_one_message(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    sent = spy_on_outbound(monkeypatch)

    async def scenario(h: Harness) -> None:
        await h.start_master()
        await h.add_agent("n1", cpus=8, memory=16 * GiB)
        job = await h.submit(["sleep"], cpu=1, memory=GiB, tasks=8)
        await h.wait_job(job.id, _running(8))
        kinds = [m.WhichOneof("kind") for m in sent if m.WhichOneof("kind") in ("launch", "launches")]
        assert kinds == ["launches"]
        assert len([m for m in sent if m.WhichOneof("kind") == "launches"][0].launches.launches) == 8
        assert sorted(t.task_id for t in h.agents["n1"].agent.tasks.running()) == sorted(t.id for t in job.tasks)
    run(scenario, tmp_path)


async def old_agent(h: Harness, name: str, got: list[str]) -> None:
    """The previous version's agent: a Register without features; it takes LaunchTask only
    (a LaunchTasks would be an unknown kind to it, recorded here) and answers RUNNING."""
    call = agent_pb2_grpc.AgentServiceStub(h.channel).Connect()
    reg = agent_pb2.Register(node=name, runtime="fake", agent_version="0.old")
    reg.capacity.cpu, reg.capacity.memory = 8, 16 * GiB
    await call.write(agent_pb2.AgentMessage(register=reg))
    seq = 0
    while (message := await call.read()) is not grpc.aio.EOF:
        kind = message.WhichOneof("kind")
        got.append(kind)
        if kind == "registered":
            assert message.registered.usage_interval_s == 0     # keeps heartbeating as before
        if kind == "launch":
            seq += 1
            event = agent_pb2.TaskEvent(seq=seq, task_id=message.launch.task_id, attempt=message.launch.attempt,
                                        state=common_pb2.TASK_RUNNING, at=1.0)
            await call.write(agent_pb2.AgentMessage(events=agent_pb2.TaskEvents(events=[event])))


def test_an_agent_of_the_previous_version_gets_launches_one_by_one(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        got: list[str] = []
        reader = asyncio.create_task(old_agent(h, "old1", got))
        try:
            await wait_until(lambda: asyncio.sleep(0, "registered" in got))
            job = await h.submit(["sleep"], cpu=1, memory=GiB, tasks=5)
            await h.wait_job(job.id, _running(5))
            assert got.count("launch") == 5 and "launches" not in got
        finally:
            reader.cancel()
    run(scenario, tmp_path)


class OldMaster(agent_pb2_grpc.AgentServiceServicer):
    """The previous version's master: Registered without a usage interval, one LaunchTask
    per launch, Ack(0) for every heartbeat and Ack(seq) for events."""

    def __init__(self) -> None:
        self.register: agent_pb2.Register | None = None
        self.heartbeats = 0
        self.running: set[str] = set()
        self.to_send: asyncio.Queue[agent_pb2.MasterMessage] = asyncio.Queue()

    async def Connect(self, requests: AsyncIterator[agent_pb2.AgentMessage], context) -> AsyncIterator[agent_pb2.MasterMessage]:  # type: ignore[no-untyped-def,override]
        first = await requests.__anext__()
        self.register = first.register
        yield agent_pb2.MasterMessage(registered=agent_pb2.Registered(heartbeat_interval_s=0.1))
        reader = asyncio.create_task(self._read(requests))
        try:
            while True:
                yield await self.to_send.get()
        finally:
            reader.cancel()

    async def _read(self, requests: AsyncIterator[agent_pb2.AgentMessage]) -> None:
        async for message in requests:
            kind = message.WhichOneof("kind")
            if kind == "heartbeat":
                self.heartbeats += 1
                self.to_send.put_nowait(agent_pb2.MasterMessage(ack=agent_pb2.Ack(seq=0)))
            elif kind == "events":
                self.running.update(e.task_id for e in message.events.events if e.state == common_pb2.TASK_RUNNING)
                seq = max(e.seq for e in message.events.events)
                self.to_send.put_nowait(agent_pb2.MasterMessage(ack=agent_pb2.Ack(seq=seq)))


def test_this_agent_works_with_a_master_of_the_previous_version(tmp_path: Path) -> None:
    async def main() -> None:
        old = OldMaster()
        server = grpc.aio.server(options=GRPC_OPTIONS)
        agent_pb2_grpc.add_AgentServiceServicer_to_server(old, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        settings = AgentSettings(master=f"127.0.0.1:{port}", node="n1", cpus=4, memory_bytes=8 * GiB,
                                 state_dir=tmp_path / "agent", heartbeat_interval_s=0.5, reconnect_max_s=0.5)
        agent = Agent(settings, FakeRuntime())
        task = asyncio.create_task(agent.run())
        try:
            await asyncio.wait_for(agent.registered.wait(), 10)
            assert old.register is not None and set(old.register.features) == set(AGENT_FEATURES)
            spec = jobs_pb2.JobSpec(command=["sleep"], tasks=2)
            spec.resources.cpu, spec.resources.memory = 1, GiB
            for i in range(2):
                old.to_send.put_nowait(agent_pb2.MasterMessage(launch=agent_pb2.LaunchTask(
                    task_id=f"0123abcd.{i}", attempt=1, job_id="0123abcd", index=i, spec=spec)))
            await wait_until(lambda: asyncio.sleep(0, old.running == {"0123abcd.0", "0123abcd.1"}))
            await asyncio.sleep(0.6)          # past the agent's own first interval
            # No usage interval from this master: heartbeats at its 0.1 s interval, as before.
            # Ten of them take about 1 s; at the agent's own 0.5 s interval (or the 30 s usage
            # interval) ten take at least 9 x 0.5 s, and a loaded host only makes them later.
            before, started = old.heartbeats, asyncio.get_running_loop().time()
            await wait_until(lambda: asyncio.sleep(0, old.heartbeats - before >= 10), 30)
            took = asyncio.get_running_loop().time() - started
            assert took < 9 * 0.5, f"ten heartbeats took {took:.2f} s: not at the master's 0.1 s interval"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await server.stop(0)
    asyncio.run(main())


def test_reports_raised_together_go_up_together_and_are_acked_once(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    sent = spy_on_outbound(monkeypatch)
    received: list[int] = []
    real = grpc_api.inbound_from_pb

    def counting(message):  # type: ignore[no-untyped-def]
        if message.WhichOneof("kind") == "events":
            received.append(len(message.events.events))
        return real(message)
    monkeypatch.setattr(grpc_api, "inbound_from_pb", counting)

    async def scenario(h: Harness) -> None:
        await h.start_master()
        running = await h.add_agent("n1", cpus=8, memory=16 * GiB, report_flush_s=0.2)
        job = await h.submit(["true"], cpu=1, memory=GiB, tasks=8)
        await h.wait_job(job.id, lambda j: j.state == jobs_pb2.JOB_SUCCEEDED)
        await wait_until(lambda: asyncio.sleep(0, not running.agent.outbox.unacked()))
        assert sum(received) == 16 and len(received) <= 4          # 8 RUNNING + 8 SUCCEEDED
        acks = [m.ack.seq for m in sent if m.WhichOneof("kind") == "ack" and m.ack.seq > 0]
        assert len(acks) == len(received) and acks == sorted(set(acks)) and acks[-1] == 16
    run(scenario, tmp_path)


def test_a_quiet_agent_stays_up_on_its_stream_and_a_dead_one_is_lost_within_its_timeouts(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    beats: list[float] = []
    real = grpc_api.inbound_from_pb

    def counting(message):  # type: ignore[no-untyped-def]
        if message.WhichOneof("kind") == "heartbeat":
            beats.append(asyncio.get_running_loop().time())
        return real(message)
    monkeypatch.setattr(grpc_api, "inbound_from_pb", counting)

    async def scenario(h: Harness) -> None:
        await h.start_master(node_timeout_s=1.0, lost_timeout_s=1.0)
        quiet = await h.add_agent("n1", usage_interval_s=30.0)
        job = await h.submit(["sleep"], cpu=1, memory=GiB)
        job = await h.wait_job(job.id, _running(1))
        assert quiet.agent.usage_interval_s == 30.0
        await asyncio.sleep(0.5)                 # the start's report is out
        before = len(beats)
        await asyncio.sleep(2.5)                 # 12 heartbeat intervals, over twice the node timeout
        assert len(beats) - before == 0          # nothing changed: no report
        assert not quiet.agent._fenced           # its open stream is word from the master (fence 1.5 s)
        nodes = (await h.cluster.ListNodes(jobs_pb2.ListNodesRequest())).nodes
        assert [(n.name, n.state) for n in nodes] == [("n1", "READY")]
        # The agent dies: its stream ends, the node is DOWN, and after node + lost timeout
        # (counted from the stream's end) the task is LOST.
        quiet.task.cancel()
        await asyncio.gather(quiet.task, return_exceptions=True)
        lost = await h.wait_job(job.id, lambda j: j.tasks[0].state == common_pb2.TASK_LOST)
        assert "unreachable" in lost.tasks[0].reason
    run(scenario, tmp_path)
