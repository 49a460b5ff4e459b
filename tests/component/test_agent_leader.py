"""`tcl-agent --master a,b`: a real agent daemon (fake runtime) finds the leader, the real
master of the harness, past a standby (master/store/standby.py, agent port, fake LeaderView) and
past an address that refuses connections."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import grpc
import pytest

from tcluster.agent.daemon import Agent
from tcluster.agent.joinclient import join
from testkit.fake_runtime import FakeRuntime
from tcluster.agent.settings import AgentSettings
from tcluster.master.store.standby import LeaderInfo, StandbyInterceptor
from tcluster.v1 import agent_pb2_grpc, common_pb2, jobs_pb2
from tests.component.harness import WAIT_S, Harness, RunningAgent, run, wait_until
from tests.component.secure import SecureCluster
from testkit.procs import closed_port


class View:
    def __init__(self, agent_address: str) -> None:
        self.agent_address = agent_address

    def leading(self) -> bool:
        return False

    def leader(self) -> LeaderInfo | None:
        return LeaderInfo("m1", "", self.agent_address, "") if self.agent_address else None

    def why_no_leader(self) -> str:
        return "election in progress"


async def start_standby(leader_agent_address: str) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server(interceptors=[StandbyInterceptor(View(leader_agent_address), "agent")])
    agent_pb2_grpc.add_AgentServiceServicer_to_server(agent_pb2_grpc.AgentServiceServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def start_agent(h: Harness, name: str, masters: str) -> RunningAgent:
    settings = AgentSettings(master=masters, node=name, cpus=4, memory_bytes=8 * 2**30,
                             state_dir=h.tmp / "agents" / name, heartbeat_interval_s=0.2, reconnect_max_s=0.5,
                             kill_grace_s=0.5)
    runtime = FakeRuntime()
    agent = Agent(settings, runtime)
    running = RunningAgent(agent, runtime, asyncio.create_task(agent.run()))
    h.agents[name] = running
    return running


def test_the_agent_follows_the_standbys_hint_to_the_leader(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        server, standby = await start_standby(h.address)
        try:
            with caplog.at_level(logging.INFO, logger="tcluster.agent.daemon"):
                running = start_agent(h, "n1", standby)      # only the standby is named
                await asyncio.wait_for(running.agent.registered.wait(), WAIT_S)
            assert running.agent.master == h.address
            assert f"following the leader at {h.address} ({standby} is a standby)" in caplog.text
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
            job = await h.submit(["sleep"])                   # the leader places work on it
            await h.wait_job(job.id, lambda j: (j.tasks[0].state, j.tasks[0].node) == (common_pb2.TASK_RUNNING, "n1"))
        finally:
            await server.stop(0)
    run(scenario, tmp_path)


def test_the_agent_passes_over_masters_that_cannot_take_it(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        server, standby = await start_standby("")           # no master leads, as far as it knows
        try:
            running = start_agent(h, "n1", f"{closed_port()},{standby},{h.address}")
            await asyncio.wait_for(running.agent.registered.wait(), WAIT_S)
            assert running.agent.master == h.address
            nodes = await h.cluster.ListNodes(jobs_pb2.ListNodesRequest())
            assert [n.name for n in nodes.nodes] == ["n1"]
        finally:
            await server.stop(0)
    run(scenario, tmp_path)


def test_a_master_that_comes_back_is_found_again_round_robin(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        running = start_agent(h, "n1", f"{h.address},{closed_port()}")
        await asyncio.wait_for(running.agent.registered.wait(), WAIT_S)
        await h.stop_master()          # the same address comes back: the agent gets there again
        await wait_until(lambda: asyncio.sleep(0, not running.agent.registered.is_set()))
        await h.start_master()
        await asyncio.wait_for(running.agent.registered.wait(), WAIT_S)
        assert running.agent.master == h.address
    run(scenario, tmp_path)


def test_join_tries_each_master_and_keeps_the_list(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h)
        down = closed_port()
        outcome = await join(f"{down},{h.address}", c.token(), "n1", c.state_dir("n1"))
        assert outcome.state.master == f"{down},{h.address}"
        agent_port = c.agent_address.rpartition(":")[2]
        assert outcome.state.agent_address == f"127.0.0.1:{agent_port}"    # one host here: one agent address
        await c.start_agent("n1")         # mutual TLS, from the joined list
        await c.wait_node("n1", "READY")
    run(scenario, tmp_path)


def test_a_master_that_never_answers_the_connect_is_left_within_the_stale_window(tmp_path: Path) -> None:
    """A SIGSTOPped master: the kernel still completes the TCP handshake, nothing speaks HTTP/2.
    Before the fix the agent sat in gRPC's 20 s connect timeout there (tests/ha saw it follow a
    standby's stale hint onto the hung leader); now a session that registers with nobody in the
    stale window (5 s here) is left for the next master like a silent registered one."""
    async def scenario(h: Harness) -> None:
        await h.start_master()
        with socket.socket() as hung:
            hung.bind(("127.0.0.1", 0))
            hung.listen(16)              # never accepted: connects complete, no byte ever comes back
            hung_address = f"127.0.0.1:{hung.getsockname()[1]}"
            running = start_agent(h, "n1", f"{hung_address},{h.address}")
            await asyncio.wait_for(running.agent.registered.wait(), 15.0)   # gRPC's own connect timeout: 20 s
            assert running.agent.master == h.address
    run(scenario, tmp_path)
