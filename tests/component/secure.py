"""A secure master (real TLS on 127.0.0.1, port 0) with joined in-process agents."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from tcluster.agent import codec
from tcluster.agent.daemon import Agent
from tcluster.agent.joinclient import join
from tcluster.agent.joinstate import NodeCredentials, load_joined
from tcluster.security.channel import TLS_OPTIONS
from testkit.fake_runtime import FakeRuntime
from tcluster.agent.settings import AgentSettings
from tcluster.master.identity.nodeauth import NodeAuth
from tcluster.master.identity.accounts import bootstrap_admin
from tcluster.domain.resources import Resources
from tcluster.security.jointoken import JoinTokenText
from tcluster.security.pki import MasterPki, init_pki
from tcluster.v1 import agent_pb2, agent_pb2_grpc, jobs_pb2, jobs_pb2_grpc
from tests.component.harness import WAIT_S, Harness, RunningAgent, wait_until


@dataclass
class SecureCluster:
    h: Harness
    pki: MasterPki

    @classmethod
    async def start(cls, h: Harness, **overrides: object) -> "SecureCluster":
        pki = init_pki(h.tmp / "master", [])
        admin = bootstrap_admin(h.tmp / "master")     # clients of a secure master need a user token
        await h.start_master(**overrides)
        assert h.master is not None and h.master.secure
        assert h.channel is not None
        await h.channel.close()   # the harness opened a plaintext channel: clients use TLS here
        creds = grpc.composite_channel_credentials(grpc.ssl_channel_credentials(pki.ca_pem),
                                                   grpc.access_token_call_credentials(admin))
        h.channel = grpc.aio.secure_channel(h.address, creds, options=TLS_OPTIONS)
        return cls(h, pki)

    @property
    def agent_address(self) -> str:
        assert self.h.master is not None
        return f"127.0.0.1:{self.h.master.agent_port}"

    def token(self, ttl_s: float = 3600, labels: dict[str, str] | None = None, now: float | None = None) -> str:
        auth = NodeAuth(self.h.tmp / "master")
        try:
            token_id, secret = auth.create_token(ttl_s, labels or {}, time.time() if now is None else now)
        finally:
            auth.close()
        return str(JoinTokenText(self.pki.fingerprint, token_id, secret))

    def state_dir(self, node: str) -> Path:
        return self.h.tmp / "agents" / node

    async def join(self, node: str, token: str | None = None) -> None:
        await join(self.h.address, token or self.token(), node, self.state_dir(node))

    def credentials(self, node: str) -> NodeCredentials:
        loaded = load_joined(self.state_dir(node))
        assert loaded is not None
        return loaded[1]

    async def start_agent(self, node: str, wait: bool = True) -> RunningAgent:
        """An agent from its joined state, as `tcl-agent --state-dir` starts it."""
        loaded = load_joined(self.state_dir(node))
        assert loaded is not None
        state, _ = loaded
        settings = AgentSettings(master=state.agent_address, node=state.node, cpus=4, memory_bytes=8 * 2**30,
                                 labels=state.labels, state_dir=self.state_dir(node), tls_dir=self.state_dir(node) / "pki",
                                 heartbeat_interval_s=0.2, reconnect_max_s=0.5, kill_grace_s=0.5)
        runtime = FakeRuntime()
        agent = Agent(settings, runtime)
        running = RunningAgent(agent, runtime, asyncio.create_task(agent.run()))
        self.h.agents[node] = running
        if wait:
            await asyncio.wait_for(agent.registered.wait(), WAIT_S)
        return running

    async def nodes(self) -> dict[str, jobs_pb2.Node]:
        response = await jobs_pb2_grpc.ClusterServiceStub(self.h.channel).ListNodes(jobs_pb2.ListNodesRequest())
        return {n.name: n for n in response.nodes}

    async def wait_node(self, node: str, state: str) -> None:
        async def check() -> bool:
            found = (await self.nodes()).get(node)
            return found is not None and found.state == state
        await wait_until(check)


def register_message(node: str, labels: dict[str, str] | None = None) -> agent_pb2.AgentMessage:
    return codec.register_to_pb(node, Resources(2, 2**30), Resources(0, 0), labels or {}, "fake", [], [])


async def connect_once(address: str, creds: grpc.ChannelCredentials | None, node: str,
                       labels: dict[str, str] | None = None) -> agent_pb2.MasterMessage:
    """One raw Connect: Register as `node`, return the first answer (or raise the RPC error)."""
    channel = (grpc.aio.secure_channel(address, creds, options=TLS_OPTIONS) if creds is not None
               else grpc.aio.insecure_channel(address))
    async with channel:
        call = agent_pb2_grpc.AgentServiceStub(channel).Connect()
        try:
            await call.write(register_message(node, labels))
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass   # the stream may already be refused: read() raises the real status
        message = await asyncio.wait_for(call.read(), WAIT_S)
        if message is grpc.aio.EOF:
            await call.wait_for_connection()
            raise AssertionError(f"stream ended without an answer: {await call.code()}")
        call.cancel()
        return message
