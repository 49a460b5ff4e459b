"""The agent daemon: one stream to the master (to the leader of several: agent/masters.py),
reconnecting with backoff; launches, kills and log requests come down it; registration,
events and heartbeats go up, and log data after them, as the master grants credit
(agent/sendqueue.py).

Cut off from the master past the fence it was given (node timeout + half the lost
timeout), the agent kills the tasks the master may start again elsewhere."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from pathlib import Path
from typing import Callable

import grpc

from tcluster import __version__
from tcluster.agent import codec
from tcluster.agent.execs import Execs
from tcluster.agent.fence import LastHeard
from tcluster.agent.joinstate import load_credentials
from tcluster.agent.masters import MasterRotation
from tcluster.agent.outbox import Outbox, private_opener
from tcluster.agent.runtime.base import Runtime
from tcluster.agent.reporting import UsageReporter
from tcluster.agent.sendqueue import Credit, LogSends, SendQueue
from tcluster.agent.settings import AgentSettings
from tcluster.agent.gpudetect import GpuInventory
from tcluster.agent.gpus import node_labels as gpu_labels
from tcluster.agent.tasks import TaskManager, state_dir_path
from tcluster.agent.taskstate import Phase
from tcluster.domain.bounds import MAX_EVENTS_PER_MESSAGE
from tcluster.wire.channels import GRPC_OPTIONS
from tcluster.wire.features import MAX_WATCH_S
from tcluster.daemonkit.leaders import parse_addresses, standby_hint
from tcluster.domain.model import DOCKER_LABEL, MEMORY_LIMIT_LABEL, NETNS_LABEL
from tcluster.daemonkit.sdnotify import Notifier
from tcluster.security.channel import TLS_OPTIONS
from tcluster.v1 import agent_pb2, agent_pb2_grpc
from tcluster.wire.protobuf import launch_from_pb

log = logging.getLogger(__name__)
FENCE_FILE = "fence.json"
# HA masters: a master that stopped answering (paused, hung) while its stream stays open is
# left after this many heartbeats without word (it acks every one), at least STALE_MIN_S,
# for the next master on the list; gRPC's keepalive alone takes ~15 s, and the fence 30.
STALE_AFTER_BEATS = 5
STALE_MIN_S = 5.0
HOUSEKEEPING_S = 60.0
RESEND_AFTER_S = 10.0


class Agent:
    def __init__(self, settings: AgentSettings, runtime: Runtime, gpus: GpuInventory = GpuInventory()) -> None:
        self.settings = settings
        self.runtime = runtime
        state_dir_path(settings.state_dir)
        # Unacked reports live on disk too: a restarted agent still delivers them.
        self.outbox = Outbox(settings.state_dir / "outbox.jsonl")
        self.tasks = TaskManager(settings, runtime, self.outbox, gpus)
        self.heartbeat_interval_s = settings.heartbeat_interval_s
        # Issue 26: from a master that chose one, usage at most this often (and the fence
        # widened by two of them); 0 (an older master): a full heartbeat every interval.
        self.usage_interval_s = 0.0
        self._watched_until = 0.0                # a UsageWatch's end (monotonic) and its interval
        self._watch_interval_s = settings.heartbeat_interval_s
        self.fence_after_s = self._load_fence()
        # The last message from the master, on the monotonic clock. A restart does not reset
        # it: silence already counted before the restart (agent/fence.py) still counts.
        self.contact = LastHeard(settings.state_dir)
        silence = self.contact.silence_at_start()
        if silence > 0:
            log.info("last word from the master %.1fs ago (before this start): the fence counts from then", silence)
        self.last_heard = time.monotonic() - silence
        self.last_message = self.last_heard       # the master's last message itself (HA staleness)
        self._session_task: asyncio.Task[None] | None = None
        self._stale = False                     # the watchdog ended the session: its master went silent
        self._fenced = False
        self.registered = asyncio.Event()   # set while a session is up (tests wait on it)
        self.rotation = MasterRotation(parse_addresses(settings.master, "--master"))
        self.master = self.rotation.masters[0]     # the address of the current session
        self._out = SendQueue()              # heartbeats and events before log data
        self._log_sends = LogSends()
        self._execs = Execs(runtime, self._task_running)      # `tcl exec` (agent/execs.py)
        # LoTES (memory only): the bin this node emulates, and each task's class
        self.bin_target: agent_pb2.BinTarget | None = None
        self.classes: dict[str, int] = {}
        # systemd (tcluster/daemonkit/sdnotify.py): READY=1 once the tasks are re-adopted, WATCHDOG=1
        # after each heartbeat (or reconnect attempt); main sets a real one under systemd.
        self.notifier = Notifier.disabled()
        self.on_ready: Callable[[], None] = lambda: None
        self.ready = False

    async def run(self) -> None:
        """Stays connected until cancelled; backoff 0.2 s doubling to reconnect_max_s, with jitter.
        First re-adopts what a previous run of the agent left running. Any unexpected error in
        a session is logged and the session starts again: the daemon never idles half-dead."""
        await self.tasks.recover()
        self._ready()
        watchdog = asyncio.create_task(self._watchdog(), name="agent-watchdog")
        delay = 0.2
        try:
            while True:
                self.notifier.watchdog()      # between sessions this loop is the one that turns
                started = time.monotonic()
                self.master = self.rotation.next()
                hint: str | None = None
                try:
                    await self._watched_session()
                except (grpc.aio.AioRpcError, ConnectionError) as error:
                    hint = standby_hint(error)
                    self._log_session_end(error, hint)
                except Exception:
                    log.exception("agent session failed; reconnecting")
                finally:
                    self.registered.clear()
                if time.monotonic() - started > 10:
                    delay = 0.2
                self.notifier.status(f"node {self.settings.node}: no session with {self.master}; reconnecting")
                if not self.rotation.ended(hint):
                    continue      # another master (or the hinted leader) may take us now
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, self.settings.reconnect_max_s)
        finally:
            watchdog.cancel()

    def _ready(self) -> None:
        self.ready = True
        self.notifier.ready(f"node {self.settings.node}: {len(self.tasks.running())} task(s) re-adopted; "
                            f"connecting to {self.rotation.masters[0]}")
        self.on_ready()

    async def _watched_session(self) -> None:
        """The session, ended by the watchdog (ConnectionError) if the master goes silent."""
        # A new master gets the whole stale window to answer: one that accepts the connect
        # and never speaks (SIGSTOPped, hung) is left like one gone silent mid-stream.
        self.last_message = max(self.last_message, time.monotonic())
        self._session_task = asyncio.create_task(self._session(), name="agent-session")
        try:
            await self._session_task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            # The agent itself is stopping, even when the silence watchdog cancelled the session
            # in the same turn: that cancel must not turn the stop into a reconnect.
            if not self._stale or (current is not None and current.cancelling()):
                raise
            raise ConnectionError(f"no word from the master for over {self._stale_after():.0f}s") from None
        finally:
            self._stale = False
            self._session_task = None

    def _stale_after(self) -> float:
        """The master answers every report; with usage intervals, reports are that far apart."""
        return max(STALE_AFTER_BEATS * max(self.heartbeat_interval_s, self.usage_interval_s), STALE_MIN_S)

    def _leave_if_silent(self, silent: float) -> None:
        """Several masters: one that went silent mid-stream, or never answered the connect
        (gRPC's own connect timeout is 20 s), is left for the next."""
        task = self._session_task
        if (task is not None and not task.done() and not self._stale and len(self.rotation.masters) > 1
                and silent > self._stale_after()):
            log.warning("no word from master %s for %.0fs: trying the next master", self.master, silent)
            self._stale = True
            task.cancel()

    def _log_session_end(self, error: Exception, hint: str | None) -> None:
        code = error.code() if isinstance(error, grpc.aio.AioRpcError) else None
        if hint:
            log.info("following the leader at %s (%s is a standby)", hint, self.master)
        elif hint is not None:
            log.info("%s: %s; trying the next master", self.master, error.details())  # type: ignore[union-attr]
        elif code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
                    grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
            log.error("master refused this agent: %s", error.details())  # type: ignore[union-attr]
        else:
            detail = f"{code.name}: {error.details()}"[:300] if code else str(error)  # type: ignore[union-attr]
            log.info("master %s unreachable (%s); retrying", self.master, detail)

    def _channel(self) -> grpc.aio.Channel:
        """Mutual TLS once joined (the credentials are read at each connect), else plaintext."""
        if self.settings.tls_dir is None:
            return grpc.aio.insecure_channel(self.master, options=GRPC_OPTIONS)
        creds = load_credentials(self.settings.tls_dir).channel_credentials()
        return grpc.aio.secure_channel(self.master, creds, options=[*GRPC_OPTIONS, *TLS_OPTIONS])

    async def _session(self) -> None:
        async with self._channel() as channel:
            call = agent_pb2_grpc.AgentServiceStub(channel).Connect()
            self._out = SendQueue()
            self._watched_until = 0.0       # a new master session starts unwatched (master/usagewatch.py)
            pending = self.outbox.unacked(MAX_EVENTS_PER_MESSAGE)
            register = codec.register_to_pb(
                self.settings.node, self.tasks.capacity, self.tasks.reserved, self.node_labels(),
                self.runtime.name, self.tasks.running(), pending, __version__, self.tasks.ceilings,
                usage_interval_s=self.settings.usage_interval_s, sent_at=time.time())
            # Before the await: reports added meanwhile (or beyond the cap) go as events.
            self.outbox.mark_sent(pending[-1][0] if pending else 0)
            await call.write(register)
            helpers = [asyncio.create_task(c) for c in (self._writer(call), self._heartbeats(), self._events())]
            try:
                await self._reader(call)
            finally:
                for helper in helpers:
                    helper.cancel()
                self._log_sends.cancel_all()      # their master's stream is gone
                self._execs.cancel_all()

    def node_labels(self) -> dict[str, str]:
        """The operator's labels plus what this node can do (placement constraints use them)."""
        labels = {**gpu_labels(self.tasks.gpus.devices), **self.settings.labels}   # the operator's win
        if getattr(self.runtime, "docker", None) is not None:
            labels[DOCKER_LABEL] = "true"
        if getattr(self.runtime, "nets", None) is not None:
            labels[NETNS_LABEL] = "true"
        if not self.settings.unlimited_memory:
            labels[MEMORY_LIMIT_LABEL] = "true"
        return labels

    async def _reader(self, call: grpc.aio.StreamStreamCall) -> None:
        while (message := await call.read()) is not grpc.aio.EOF:
            self.last_heard = self.last_message = time.monotonic()
            self.contact.heard(self._fence_limit_s() if self.fence_after_s > 0 else 0.0)
            self._fenced = False
            kind = message.WhichOneof("kind")
            if kind == "registered":
                self._on_registered(message.registered)
            elif kind == "launch":
                self._launch(message.launch)
            elif kind == "launches":          # a master's batch (we announced launch-batch)
                for launch in message.launches.launches:
                    self._launch(launch)
            elif kind == "bin_target":
                self._on_bin_target(message.bin_target)
            elif kind == "kill":
                self.tasks.kill(message.kill.task_id, message.kill.attempt, message.kill.reason, message.kill.grace_s)
            elif kind == "log_request":
                req = message.log_request
                self._log_sends.start(req.request_id, req.window,
                                      lambda credit, req=req: self._send_log(req, credit))
            elif kind == "log_credit":
                credit = message.log_credit
                self._log_sends.credit(credit.request_id, credit.chunks, credit.cancel)
            elif kind == "exec_start":
                self._execs.start(message.exec_start, self._out.put_log, self._out.put_control)
            elif kind == "exec_feed":
                self._execs.feed(message.exec_feed)
            elif kind == "usage_watch":       # someone watches this node: fresh samples for a while
                watch = message.usage_watch
                self._watched_until = time.monotonic() + min(max(watch.for_s, 0.0), MAX_WATCH_S)
                self._watch_interval_s = max(watch.interval_s, self.heartbeat_interval_s)
            elif kind == "ack":
                self.outbox.ack(message.ack.seq)
                if message.ack.usage_interval_s > 0 and self.usage_interval_s > 0:
                    self.usage_interval_s = message.ack.usage_interval_s     # the cluster's size changed
        raise ConnectionError("master closed the stream")

    def _task_running(self, task_id: str, attempt: int) -> bool:
        found = self.tasks.state.attempts.get(f"{task_id}.{attempt}")
        return found is not None and found.phase is Phase.RUNNING and not found.kill_reason

    def _launch(self, msg: agent_pb2.LaunchTask) -> None:
        launch = launch_from_pb(msg)
        if launch.lotes_class is not None:
            self.classes[launch.task_id] = launch.lotes_class
        self.tasks.launch(launch)

    def _on_registered(self, msg: agent_pb2.Registered) -> None:
        if msg.heartbeat_interval_s > 0:
            self.heartbeat_interval_s = msg.heartbeat_interval_s
        self.usage_interval_s = max(0.0, msg.usage_interval_s)   # the operator's, echoed, or the master's
        if msg.fence_after_s != self.fence_after_s:
            self.fence_after_s = msg.fence_after_s
            self._save_fence()
        for kill in msg.kills:
            self.tasks.kill(kill.task_id, kill.attempt, kill.reason, kill.grace_s)
        if msg.HasField("bin_target"):
            self._on_bin_target(msg.bin_target)
        log.info("registered with %s as %s", self.master, self.settings.node)
        self.notifier.status(f"node {self.settings.node}: registered with {self.master}")
        self.rotation.connected()
        self.registered.set()

    def _on_bin_target(self, msg: agent_pb2.BinTarget) -> None:
        """LoTES: the master's target mix for this node; it also re-tags running tasks."""
        self.classes.update(msg.classes)
        changed = self.bin_target is None or self.bin_target.config != msg.config \
            or dict(self.bin_target.counts) != dict(msg.counts)
        self.bin_target = msg
        if changed:
            mix = " ".join(f"c{k}:{n}" for k, n in sorted(msg.counts.items()))
            log.info("LoTES bin: %s", f"{msg.config} {mix}" if msg.config else f"none ({msg.fallback or 'not in the plan'})")

    def class_mix(self) -> dict[int, int]:
        """Running tasks per LoTES class (tasks without a class are left out)."""
        running = {r.task_id for r in self.tasks.running()}
        for task_id in [t for t in self.classes if t not in running]:
            del self.classes[task_id]
        mix: dict[int, int] = {}
        for task_id in running:
            k = self.classes.get(task_id, -1)
            if k >= 0:
                mix[k] = mix.get(k, 0) + 1
        return mix

    async def _writer(self, call: grpc.aio.StreamStreamCall) -> None:
        while True:
            await call.write(await self._out.get())

    async def _events(self) -> None:
        """One message per flush: reports raised within report_flush_s of the first (a batch
        of launches starting, tasks ending together) go up together and are acked once."""
        while True:
            await self.outbox.ready.wait()
            if self.settings.report_flush_s > 0:
                await asyncio.sleep(self.settings.report_flush_s)
            batch = self.outbox.take_unsent()
            if batch:
                self._out.put_control(codec.events_to_pb(batch))

    async def _heartbeats(self) -> None:
        """Samples every heartbeat interval (on the node only); what goes up, and when, is
        the reporter's choice (agent/reporting.py): everything each time for an older master."""
        reporter: UsageReporter[object] = UsageReporter()
        while True:
            usage = await asyncio.to_thread(self.tasks.sample_all)
            free = self.tasks.free()
            sent = reporter.decide(time.monotonic(), free, usage, self._report_interval_s(), self.heartbeat_interval_s)
            if sent is not None:
                gpus = await asyncio.to_thread(self.tasks.sample_gpus) if self.tasks.gpus.source == "nvml" else ()
                self._out.put_control(codec.heartbeat_to_pb(free, sent, time.time(), self.class_mix(), gpus))
            hang_if_asked(self.settings.test_hang_file)
            self.notifier.watchdog()      # only after a heartbeat went out: a stuck loop stops the pings
            await asyncio.sleep(self.heartbeat_interval_s)

    def _report_interval_s(self) -> float:
        """The usage interval, or shorter while a UsageWatch lasts. Only reports come more
        often: the fence and the master's silence limit keep the usage interval."""
        if self.usage_interval_s > 0 and time.monotonic() < self._watched_until:
            return min(self.usage_interval_s, self._watch_interval_s)
        return self.usage_interval_s

    async def _watchdog(self) -> None:
        """The fence, and housekeeping (old task directories) once a minute."""
        last_sweep = 0.0
        while True:
            await asyncio.sleep(min(1.0, self.heartbeat_interval_s))
            silent = time.monotonic() - self.last_heard
            self._leave_if_silent(time.monotonic() - self.last_message)
            if self.fence_after_s > 0 and silent > self._fence_limit_s() and not self._fenced:
                self._fenced = True
                log.warning("no word from the master for %.0fs: stopping tasks that may run elsewhere", silent)
                self.tasks.cut_off(silent)
            if self.registered.is_set() and self.outbox.resend_if_stuck(time.monotonic(), RESEND_AFTER_S):
                log.warning("the master acknowledged no task event for %.0fs: sending them again", RESEND_AFTER_S)
            if time.monotonic() - last_sweep > HOUSEKEEPING_S:
                last_sweep = time.monotonic()
                await asyncio.to_thread(self.tasks.sweep_old_logs)

    def _fence_limit_s(self) -> float:
        """Silence (no message from the master) after which the tasks are stopped. Only the
        master's own messages count, never a stream that merely looks open (a blackholed one
        does for keepalive's 15 s). With a usage interval a quiet agent reports, and hears
        an Ack, only once per interval, and the master takes it for DOWN only after the node
        timeout plus two missed reports: the fence moves by the same two intervals, so it
        still falls before the master's LOST, by the margin fence_after_s keeps."""
        return self.fence_after_s + 2 * max(0.0, self.usage_interval_s)

    async def _send_log(self, req: agent_pb2.LogRequest, credit: Credit) -> None:
        """Each piece waits for credit, then for room in the log lane: reading the file
        pauses meanwhile (the generator is not advanced)."""
        try:
            async for chunk in self.tasks.read_log(req.task_id, req.stderr, req.tail_bytes, req.max_bytes,
                                                   req.follow, req.attempt):
                await credit.take()
                await self._out.put_log(codec.log_data_to_pb(req.request_id, chunk))
            last = codec.log_data_to_pb(req.request_id, eof=True)
        except OSError as error:
            last = codec.log_data_to_pb(req.request_id, eof=True, error=str(error))
        await credit.take()
        await self._out.put_log(last)

    def _load_fence(self) -> float:
        try:
            return float(json.loads((self.settings.state_dir / FENCE_FILE).read_text())["fence_after_s"])
        except (OSError, ValueError, KeyError, TypeError):
            return self.settings.fence_after_s

    def _save_fence(self) -> None:
        path = self.settings.state_dir / FENCE_FILE
        tmp = path.with_name(FENCE_FILE + ".tmp")
        with open(tmp, "w", opener=private_opener) as out:
            out.write(json.dumps({"fence_after_s": self.fence_after_s}))
        tmp.replace(path)

    async def shutdown(self) -> None:
        self.notifier.close()
        if self.settings.kill_tasks_on_exit:
            await self.tasks.shutdown()
        self.runtime.close()


def hang_if_asked(trigger: Path | None) -> None:
    """Test only (settings.test_hang_file): blocks the event loop for good, as a deadlock
    would, once the file appears; the file is removed so that the restarted agent runs."""
    if trigger is None or not trigger.exists():
        return
    trigger.unlink(missing_ok=True)
    log.warning("test hang: %s appeared; the heartbeat loop stops here", trigger)
    while True:
        time.sleep(3600)
