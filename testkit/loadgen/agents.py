"""Simulated agents: many per asyncio loop, each on its own Connect stream, speaking the
real protocol (agent.proto) to a real master.

A simulated agent registers, heartbeats at the interval the master gives it (free
resources and one usage sample per running task), answers a LaunchTask with RUNNING at
once and, after the task's duration, with SUCCEEDED; it answers a KillTask with KILLED
(also for attempts it does not run, as a real agent does). A launch that does not fit
its free resources, or a second launch of a task it already runs, is refused with
`rejected` like a real agent's, and counted: the invariants a test checks.

The task's duration comes from its job's command, `["sleep", SECONDS]` (`inf`: until
killed), so a driver says how long tasks run with the job it submits.

Timing, on the monotonic clock (system-wide on Linux, so comparable across processes):
- every heartbeat is answered by the master with `Ack(seq=0)` in stream order, so the
  n-th such ack answers the n-th heartbeat: heartbeat -> ack round trips;
- every LaunchTask's arrival, and when the master acknowledged (persisted) the RUNNING
  event that answered it.

Cost: messages are built once and kept serialized; a heartbeat's bytes are rebuilt only
when the agent's tasks change, otherwise only `sent_at` (the last 8 bytes) is patched.
Streams share channels (HTTP/2 connections), `streams_per_channel` each."""

from __future__ import annotations

import asyncio
import collections
import math
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import grpc

from tcluster.wire.channels import GRPC_OPTIONS
from tcluster.wire.features import AGENT_FEATURES
from tcluster.v1 import agent_pb2, common_pb2

CONNECT = "/tcluster.v1.AgentService/Connect"
CHANNEL_OPTIONS = [*GRPC_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]   # one connection per channel object
EPS = 1e-9
TASK_RUNNING, TASK_SUCCEEDED, TASK_FAILED, TASK_KILLED = (
    common_pb2.TASK_RUNNING, common_pb2.TASK_SUCCEEDED, common_pb2.TASK_FAILED, common_pb2.TASK_KILLED)
_SENT_AT_TAG = 0x19          # Heartbeat.sent_at: field 3, wire type 1 (64-bit)


def task_duration(command: list[str] | tuple[str, ...]) -> float:
    """`["sleep", "2.5"]` -> 2.5; `inf` or anything else -> runs until killed."""
    if len(command) >= 2 and command[0] == "sleep":
        try:
            value = float(command[1])
        except ValueError:
            return math.inf
        return value if value >= 0 else math.inf
    return math.inf


@dataclass
class FleetStats:
    """What one loop's agents saw since the last snapshot (picklable)."""
    registered: int = 0
    connected: int = 0
    disconnects: int = 0
    heartbeats_sent: int = 0
    heartbeats_acked: int = 0
    hb_rtt: list[float] = field(default_factory=list)         # heartbeat -> Ack(0), seconds
    hb_lag: list[float] = field(default_factory=list)         # harness lateness sending a heartbeat
    launches: list[tuple[str, int, str, float]] = field(default_factory=list)   # task, attempt, node, t
    running_acked: list[tuple[str, int, float]] = field(default_factory=list)   # task, attempt, t
    finished: int = 0
    kills: int = 0
    kills_unknown: int = 0
    duplicate_launches: int = 0
    rejected_conflict: int = 0
    rejected_oversubscribed: int = 0
    events_sent: int = 0
    events_acked: int = 0
    events_unacked_now: int = 0       # gauge: sent, not yet acknowledged
    hb_overdue_now: int = 0           # gauge: heartbeats unanswered for longer than the interval
    running_now: int = 0              # gauge: tasks running on these agents
    max_used_fraction: float = 0.0    # gauge: highest sum(requests)/capacity seen on any agent
    errors: list[str] = field(default_factory=list)


class _Task:
    __slots__ = ("task_id", "attempt", "cpu", "memory", "timer", "usage")

    def __init__(self, task_id: str, attempt: int, cpu: float, memory: int) -> None:
        self.task_id, self.attempt, self.cpu, self.memory = task_id, attempt, cpu, memory
        self.timer: asyncio.TimerHandle | None = None
        self.usage: common_pb2.TaskUsage | None = None


class SimAgent:
    def __init__(self, fleet: Fleet, name: str, cpu: float, memory: int) -> None:
        self.fleet, self.name, self.cpu, self.memory = fleet, name, cpu, memory
        self.tasks: dict[str, _Task] = {}
        self.used_cpu, self.used_memory = 0.0, 0
        self.seq = 0
        self.unacked: collections.deque[tuple[int, str, int, int]] = collections.deque()  # seq, task, attempt, state
        self.hb_times: collections.deque[float] = collections.deque()
        self.registered = False
        self.call: grpc.aio.StreamStreamCall | None = None
        self.outbox: asyncio.Queue[bytes] = asyncio.Queue()
        self._hb: bytearray | None = None
        self._events: list[agent_pb2.TaskEvent] = []
        self._flush_soon = False
        self._report_soon = False       # stream liveness: a report after a change, at the next tick
        self._usage_sent: set[tuple[str, int]] = set()

    # ---- the stream ----

    async def run(self, channel: grpc.aio.Channel) -> None:
        connect = channel.stream_stream(CONNECT, request_serializer=None,
                                        response_deserializer=agent_pb2.MasterMessage.FromString)
        delay = 0.5
        while not self.fleet.stopping:
            try:
                await self._session(connect)
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as error:
                if not self.fleet.stopping:
                    self.fleet.note_error(f"{self.name}: stream ended: {error.code().name} {error.details()}")
            except Exception as error:  # noqa: BLE001 - reported, then reconnect
                if not self.fleet.stopping:
                    self.fleet.note_error(f"{self.name}: {type(error).__name__}: {error}")
            finally:
                if self.registered:
                    self.fleet.stats.connected -= 1
                    self.fleet.stats.disconnects += 1
                self.registered = False
                self.call = None
            if self.fleet.stopping:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _session(self, connect: grpc.aio.StreamStreamMultiCallable) -> None:
        call = connect()
        self.call = call
        self.outbox = asyncio.Queue()
        self.hb_times.clear()
        # Unacked events are resent in Register, as a real agent's outbox does.
        pending = list(self.unacked)
        self.unacked.clear()
        reg = agent_pb2.Register(node=self.name, runtime="sim", agent_version="loadgen",
                                 features=[] if self.fleet.legacy else list(AGENT_FEATURES))
        self._usage_sent.clear()
        self._hb = None
        reg.capacity.cpu, reg.capacity.memory = self.cpu, self.memory
        for t in self.tasks.values():
            running = reg.running.add(task_id=t.task_id, attempt=t.attempt)
            running.resources.cpu, running.resources.memory = t.cpu, t.memory
        for seq, task_id, attempt, state in pending:
            reg.pending_events.add(seq=seq, task_id=task_id, attempt=attempt, state=state, at=time.time(),
                                   has_exit_code=state == TASK_SUCCEEDED)
            self.unacked.append((seq, task_id, attempt, state))
        await call.write(agent_pb2.AgentMessage(register=reg).SerializeToString())
        writer = asyncio.create_task(self._writer(call))
        try:
            while (message := await call.read()) is not grpc.aio.EOF:
                self._on_message(message)
        finally:
            writer.cancel()

    async def _writer(self, call: grpc.aio.StreamStreamCall) -> None:
        outbox = self.outbox
        while True:
            await call.write(await outbox.get())

    def send(self, data: bytes) -> None:
        if self.call is not None:
            self.outbox.put_nowait(data)

    # ---- master -> agent ----

    def _on_message(self, message: agent_pb2.MasterMessage) -> None:
        kind = message.WhichOneof("kind")
        now = time.monotonic()
        stats = self.fleet.stats
        if kind == "ack":
            seq = message.ack.seq
            if message.ack.usage_interval_s > 0:
                self.fleet.interval_s = message.ack.usage_interval_s
            if seq == 0:
                if self.hb_times:
                    stats.heartbeats_acked += 1
                    stats.hb_rtt.append(now - self.hb_times.popleft())
                return
            while self.unacked and self.unacked[0][0] <= seq:
                _, task_id, attempt, state = self.unacked.popleft()
                stats.events_acked += 1
                if state == TASK_RUNNING:
                    stats.running_acked.append((task_id, attempt, now))
                    self.fleet.total_running_acked += 1
        elif kind == "launch":
            self._launch(message.launch, now)
        elif kind == "launches":
            for launch in message.launches.launches:
                self._launch(launch, now)
        elif kind == "kill":
            self._kill(message.kill.task_id, message.kill.attempt, message.kill.reason)
        elif kind == "registered":
            for kill in message.registered.kills:
                self._kill(kill.task_id, kill.attempt, kill.reason)
            if not self.registered:
                self.registered = True
                stats.registered += 1
                stats.connected += 1
            if message.registered.heartbeat_interval_s > 0:
                self.fleet.floor_s = message.registered.heartbeat_interval_s
            self.fleet.interval_s = message.registered.usage_interval_s or self.fleet.floor_s
        # log_request: simulated tasks have no logs; a real master times it out.

    def _launch(self, launch: agent_pb2.LaunchTask, now: float) -> None:
        stats = self.fleet.stats
        task_id, attempt = launch.task_id, launch.attempt
        current = self.tasks.get(task_id)
        if current is not None:
            if current.attempt == attempt:
                stats.duplicate_launches += 1        # a real agent ignores the repeat
                return
            stats.rejected_conflict += 1
            self._event(task_id, attempt, TASK_FAILED, reason="another attempt is still here", rejected=True)
            return
        res = launch.spec.resources
        if self.used_cpu + res.cpu > self.cpu + EPS or self.used_memory + res.memory > self.memory:
            stats.rejected_oversubscribed += 1
            self._event(task_id, attempt, TASK_FAILED, reason="not enough free on this node", rejected=True)
            return
        task = _Task(task_id, attempt, res.cpu, res.memory)
        self.tasks[task_id] = task
        self.used_cpu += res.cpu
        self.used_memory += res.memory
        stats.max_used_fraction = max(stats.max_used_fraction, self.used_cpu / self.cpu, self.used_memory / self.memory)
        stats.launches.append((task_id, attempt, self.name, now))
        self.fleet.total_launches += 1
        duration = task_duration(launch.spec.command)
        if math.isfinite(duration):
            task.timer = self.fleet.loop.call_later(duration, self._finish, task_id, attempt)
        self._hb = None
        self._changed()
        self._event(task_id, attempt, TASK_RUNNING)

    def _finish(self, task_id: str, attempt: int) -> None:
        task = self.tasks.get(task_id)
        if task is None or task.attempt != attempt:
            return
        self._drop(task)
        self.fleet.stats.finished += 1
        self._event(task_id, attempt, TASK_SUCCEEDED, exit_code=0, usage=task)

    def _kill(self, task_id: str, attempt: int, reason: str) -> None:
        stats = self.fleet.stats
        stats.kills += 1
        task = self.tasks.get(task_id)
        if task is None or task.attempt != attempt:
            stats.kills_unknown += 1
            self._event(task_id, attempt, TASK_KILLED, reason=f"{reason} (not running on this node)")
            return
        if task.timer is not None:
            task.timer.cancel()
        self._drop(task)
        self._event(task_id, attempt, TASK_KILLED, signal=15, reason=reason, usage=task)

    def _drop(self, task: _Task) -> None:
        del self.tasks[task.task_id]
        self.used_cpu = max(0.0, self.used_cpu - task.cpu)
        self.used_memory -= task.memory
        self._hb = None
        self._changed()

    def _changed(self) -> None:
        """Stream liveness: free resources changed, so a report goes at the agent's next
        sampling tick (a real agent samples every heartbeat interval), not at the interval."""
        if self.fleet.interval_s > self.fleet.floor_s and not self._report_soon:
            self._report_soon = True
            self.fleet.loop.call_later(self.fleet.floor_s, self._changed_report)

    def _changed_report(self) -> None:
        self._report_soon = False
        if self.heartbeat(time.monotonic(), periodic=False):
            self.fleet.stats.heartbeats_sent += 1

    # ---- agent -> master ----

    def _event(self, task_id: str, attempt: int, state: int, *, exit_code: int | None = None, signal: int = 0,
               reason: str = "", rejected: bool = False, usage: _Task | None = None) -> None:
        self.seq += 1
        event = agent_pb2.TaskEvent(seq=self.seq, task_id=task_id, attempt=attempt, state=state,
                                    has_exit_code=exit_code is not None, exit_code=exit_code or 0, signal=signal,
                                    reason=reason, at=time.time(), rejected=rejected)
        if usage is not None:
            event.usage.CopyFrom(self._usage(usage))
        self._events.append(event)
        self.unacked.append((self.seq, task_id, attempt, state))
        self.fleet.stats.events_sent += 1
        if not self._flush_soon:
            self._flush_soon = True
            self.fleet.loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Events raised in one loop iteration go up in one TaskEvents message."""
        self._flush_soon = False
        events, self._events = self._events, []
        for start in range(0, len(events), 500):
            msg = agent_pb2.AgentMessage(events=agent_pb2.TaskEvents(events=events[start:start + 500]))
            self.send(msg.SerializeToString())

    def _usage(self, task: _Task) -> common_pb2.TaskUsage:
        if task.usage is None:
            now = time.time()
            task.usage = common_pb2.TaskUsage(
                task_id=task.task_id, attempt=task.attempt, cpu_seconds=12.5, cpu_rate=task.cpu * 0.8,
                memory_bytes=int(task.memory * 0.6), memory_peak_bytes=int(task.memory * 0.7),
                memory_anon_bytes=int(task.memory * 0.5), memory_file_bytes=int(task.memory * 0.1), pids=3,
                sampled_at=now, cpu_user_seconds=10.0, cpu_system_seconds=2.5, cpu_user_rate=task.cpu * 0.7,
                cpu_system_rate=task.cpu * 0.1, io_read_bytes=4096, io_write_bytes=8192, rates_derived=True)
        return task.usage

    def heartbeat(self, now_mono: float, periodic: bool = True) -> bool:
        """A report. As the real agent's (agent/reporting.py): the periodic one, once per
        usage interval (every heartbeat for an older master), carries every task's usage;
        one sent because something changed carries only usage not sent yet."""
        if not self.registered or self.call is None:
            return False
        if periodic or self.fleet.interval_s <= self.fleet.floor_s:
            if self._hb is None:
                self._hb = self._report(self.tasks.values())
            data = self._hb
            self._usage_sent.update((t.task_id, t.attempt) for t in self.tasks.values())
        else:
            fresh = [t for t in self.tasks.values() if (t.task_id, t.attempt) not in self._usage_sent]
            data = self._report(fresh)
            self._usage_sent.update((t.task_id, t.attempt) for t in fresh)
        struct.pack_into("<d", data, len(data) - 8, time.time())
        self.hb_times.append(now_mono)
        self.outbox.put_nowait(bytes(data))
        return True

    def _report(self, tasks: Iterable[_Task]) -> bytearray:
        hb = agent_pb2.Heartbeat(sent_at=1.0)
        hb.free.cpu = max(0.0, self.cpu - self.used_cpu)
        hb.free.memory = max(0, self.memory - self.used_memory)
        hb.usage.extend(self._usage(t) for t in tasks)
        data = bytearray(agent_pb2.AgentMessage(heartbeat=hb).SerializeToString())
        if data[-9] != _SENT_AT_TAG:
            raise AssertionError("Heartbeat.sent_at is not serialized last")
        return data


class Fleet:
    """`count` simulated agents in this process's loop, named `{prefix}{i}`."""

    def __init__(self, address: str, names: list[str], cpu: float, memory: int, streams_per_channel: int = 100,
                 interval_s: float = 1.0, legacy: bool = False) -> None:
        self.address, self.names, self.cpu, self.memory = address, names, cpu, memory
        self.streams_per_channel = max(1, streams_per_channel)
        self.interval_s = interval_s     # between reports (the usage interval, else the heartbeat's)
        self.floor_s = interval_s        # the heartbeat interval: a real agent's sampling tick
        self.legacy = legacy             # register as the previous version (no features)
        self.stats = FleetStats()
        self.total_launches = 0          # since start, never reset (cheap progress counters)
        self.total_running_acked = 0
        self.stopping = False
        self.agents: list[SimAgent] = []
        self.channels: list[grpc.aio.Channel] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.loop: asyncio.AbstractEventLoop | None = None  # type: ignore[assignment]

    def note_error(self, text: str) -> None:
        if len(self.stats.errors) < 50:
            self.stats.errors.append(text)

    async def start(self, connect_rate: float = 2000.0) -> None:
        """Opens the streams (at most `connect_rate` new ones a second: a real fleet does
        not register in one instant either), then heartbeats."""
        self.loop = asyncio.get_running_loop()
        channels_needed = math.ceil(len(self.names) / self.streams_per_channel)
        self.channels = [grpc.aio.insecure_channel(self.address, options=[*CHANNEL_OPTIONS, ("grpc.channel_id", i)])
                         for i in range(channels_needed)]
        started = time.monotonic()
        for i, name in enumerate(self.names):
            agent = SimAgent(self, name, self.cpu, self.memory)
            self.agents.append(agent)
            self._tasks.append(asyncio.create_task(agent.run(self.channels[i // self.streams_per_channel])))
            ahead = (i + 1) / connect_rate - (time.monotonic() - started)
            if ahead > 0.005:
                await asyncio.sleep(ahead)
        self._tasks.append(asyncio.create_task(self._heartbeats()))

    async def wait_registered(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(a.registered for a in self.agents) and len(self.agents) == len(self.names):
                return True
            await asyncio.sleep(0.05)
        return False

    async def _heartbeats(self) -> None:
        """Agent i beats at t0 + (cycle + i/n) * interval: evenly spread, each at the
        interval. Lateness of the harness itself is recorded (hb_lag)."""
        n = len(self.agents)
        t0 = time.monotonic()
        cycle, index = 0, 0
        while not self.stopping:
            stats = self.stats               # a snapshot swaps it
            interval = self.interval_s
            now = time.monotonic()
            while True:
                due = t0 + (cycle + index / n) * interval
                if due > now:
                    break
                if self.agents[index].heartbeat(now):
                    stats.heartbeats_sent += 1
                    stats.hb_lag.append(now - due)
                index += 1
                if index == n:
                    index, cycle = 0, cycle + 1
            await asyncio.sleep(max(0.0, min(0.02, due - time.monotonic())))

    def counts(self) -> dict[str, int]:
        return {"launches": self.total_launches, "running_acked": self.total_running_acked,
                "running_now": sum(len(a.tasks) for a in self.agents),
                "unacked": sum(len(a.unacked) for a in self.agents),
                "registered": sum(a.registered for a in self.agents)}

    def snapshot(self, reset: bool = True) -> FleetStats:
        """The counters since the last snapshot, plus the gauges now."""
        stats = self.stats
        stats.events_unacked_now = sum(len(a.unacked) for a in self.agents)
        stats.running_now = sum(len(a.tasks) for a in self.agents)
        now, interval = time.monotonic(), self.interval_s
        stats.hb_overdue_now = sum(1 for a in self.agents for t in a.hb_times if now - t > interval)
        if reset:
            self.stats = FleetStats(registered=stats.registered, connected=stats.connected)
        return stats

    async def stop(self) -> None:
        self.stopping = True
        for agent in self.agents:
            for task in agent.tasks.values():
                if task.timer is not None:
                    task.timer.cancel()
            if agent.call is not None:
                agent.call.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for channel in self.channels:
            await channel.close()


def merge(parts: list[FleetStats]) -> FleetStats:
    out = FleetStats()
    for p in parts:
        for name, value in vars(p).items():
            if name == "max_used_fraction":
                out.max_used_fraction = max(out.max_used_fraction, value)
            else:
                setattr(out, name, getattr(out, name) + value)
    return out
