"""The agent daemon: one stream to the master, reconnecting with backoff; launches,
kills and log requests come down it; registration, events and heartbeats go up."""

from __future__ import annotations

import asyncio
import logging
import random
import time

import grpc

from tcluster import __version__
from tcluster.agent import codec
from tcluster.agent.outbox import Outbox
from tcluster.agent.runtime.base import Runtime
from tcluster.agent.settings import AgentSettings
from tcluster.agent.tasks import TaskManager
from tcluster.v1 import agent_pb2, agent_pb2_grpc

log = logging.getLogger(__name__)
GRPC_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
]


class Agent:
    def __init__(self, settings: AgentSettings, runtime: Runtime) -> None:
        self.settings = settings
        self.runtime = runtime
        # Unacked reports live on disk too: a restarted agent still delivers them.
        self.outbox = Outbox(settings.state_dir / "outbox.jsonl")
        self.tasks = TaskManager(settings, runtime, self.outbox)
        self.heartbeat_interval_s = settings.heartbeat_interval_s
        self.registered = asyncio.Event()   # set while a session is up (tests wait on it)
        self._writes: asyncio.Queue[agent_pb2.AgentMessage] = asyncio.Queue()

    async def run(self) -> None:
        """Stays connected until cancelled; backoff 0.2 s doubling to reconnect_max_s, with jitter.
        First re-adopts what a previous run of the agent left running."""
        await self.tasks.recover()
        delay = 0.2
        while True:
            started = time.monotonic()
            try:
                await self._session()
            except (grpc.aio.AioRpcError, ConnectionError) as error:
                code = error.code() if isinstance(error, grpc.aio.AioRpcError) else None
                if code is grpc.StatusCode.INVALID_ARGUMENT or code is grpc.StatusCode.FAILED_PRECONDITION:
                    log.error("master refused this agent: %s", error.details())
                else:
                    log.info("master unreachable (%s); retrying", code.name if code else error)
            finally:
                self.registered.clear()
            if time.monotonic() - started > 10:
                delay = 0.2
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, self.settings.reconnect_max_s)

    async def _session(self) -> None:
        async with grpc.aio.insecure_channel(self.settings.master, options=GRPC_OPTIONS) as channel:
            call = agent_pb2_grpc.AgentServiceStub(channel).Connect()
            self._writes = asyncio.Queue()
            register = self._register_message()
            self.outbox.mark_all_sent()  # before the await: reports added meanwhile go as events
            await call.write(register)
            helpers = [asyncio.create_task(c) for c in (self._writer(call), self._heartbeats(), self._events())]
            try:
                await self._reader(call)
            finally:
                for helper in helpers:
                    helper.cancel()

    def _register_message(self) -> agent_pb2.AgentMessage:
        s = self.settings
        return codec.register_to_pb(
            s.node, self.tasks.capacity, self.tasks.reserved, s.labels, self.runtime.name,
            self.tasks.running(), self.outbox.unacked())

    async def _reader(self, call: grpc.aio.StreamStreamCall) -> None:
        while (message := await call.read()) is not grpc.aio.EOF:
            kind = message.WhichOneof("kind")
            if kind == "registered":
                self._on_registered(message.registered)
            elif kind == "launch":
                asyncio.create_task(self.tasks.launch(codec.launch_from_pb(message.launch)))
            elif kind == "kill":
                k = message.kill
                self.tasks.kill(k.task_id, k.attempt, k.reason, k.grace_s or self.settings.kill_grace_s)
            elif kind == "log_request":
                asyncio.create_task(self._send_log(message.log_request))
            elif kind == "ack":
                self.outbox.ack(message.ack.seq)
        raise ConnectionError("master closed the stream")

    def _on_registered(self, msg: agent_pb2.Registered) -> None:
        if msg.heartbeat_interval_s > 0:
            self.heartbeat_interval_s = msg.heartbeat_interval_s
        for kill in msg.kills:
            self.tasks.kill(kill.task_id, kill.attempt, kill.reason, self.settings.kill_grace_s)
        log.info("registered with %s as %s", self.settings.master, self.settings.node)
        self.registered.set()

    async def _writer(self, call: grpc.aio.StreamStreamCall) -> None:
        while True:
            await call.write(await self._writes.get())

    async def _events(self) -> None:
        while True:
            await self.outbox.ready.wait()
            batch = self.outbox.take_unsent()
            if batch:
                self._writes.put_nowait(codec.events_to_pb(batch))

    async def _heartbeats(self) -> None:
        while True:
            usage = await asyncio.to_thread(self.tasks.sample_all)
            self._writes.put_nowait(codec.heartbeat_to_pb(self.tasks.free(), usage, time.time()))
            await asyncio.sleep(self.heartbeat_interval_s)

    async def _send_log(self, req: agent_pb2.LogRequest) -> None:
        try:
            async for chunk in self.tasks.read_log(req.task_id, req.stderr, req.tail_bytes, req.max_bytes):
                self._writes.put_nowait(codec.log_data_to_pb(req.request_id, chunk))
            self._writes.put_nowait(codec.log_data_to_pb(req.request_id, eof=True))
        except OSError as error:
            self._writes.put_nowait(codec.log_data_to_pb(req.request_id, eof=True, error=str(error)))

    async def shutdown(self) -> None:
        if self.settings.kill_tasks_on_exit:
            await self.tasks.shutdown()
        self.runtime.close()
