"""The agent's tasks, the I/O side: every change goes through the state machine
(`AgentTasks.handle`), and this class carries out the actions it returns — runtime calls
off the event loop, kill timers, exit watches, reports into the (fsynced) outbox — and
feeds their outcomes back in as events."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import AsyncIterator

from tcluster.agent import logfiles
from tcluster.agent.fence import LAST_HEARD_FILE
from tcluster.agent.gpudetect import GpuInventory, NvmlUsage
from tcluster.agent.gpus import GPU, visible_env
from tcluster.agent.launchrecord import load_gpus, load_record, save_record, valid_task_id
from tcluster.agent.outbox import Outbox
from tcluster.agent.outputs import log_source, prepare_outputs
from tcluster.agent.runas import task_user
from tcluster.agent.runtime.base import LaunchError, RawUsage, Runtime, Started, TaskSpec
from tcluster.agent.runtime.devices import task_rules
from tcluster.agent.settings import AgentSettings
from tcluster.agent.taskstate import (
    Adopted, AgentAction, AgentEvent, AgentTasks, ArmGrace, CutOff, Exited, GraceOver, KillAsked, LaunchAsked,
    Launched, LaunchFailed, RemoveContainer, Report, Signal, StartContainer, WatchExit,
)
from tcluster.agent.rates import to_task_usage
from tcluster.domain.fedidentity import federated_identity
from tcluster.domain.ceilings import Ceilings, effective
from tcluster.domain.gpuusage import GpuSample
from tcluster.domain.launch import Launch
from tcluster.domain.model import TaskUsage, task_network
from tcluster.domain.resources import Resources

log = logging.getLogger(__name__)

__all__ = ["TaskManager"]


class TaskManager:
    def __init__(self, settings: AgentSettings, runtime: Runtime, outbox: Outbox,
                 gpus: GpuInventory = GpuInventory()) -> None:
        self.settings = settings
        self.runtime = runtime
        self.outbox = outbox
        self.gpus = gpus
        self._nvml = NvmlUsage(gpus) if gpus.source == "nvml" else None
        net = {"net": settings.net_bps} if settings.net_bps else {}
        gpu = {GPU: float(len(gpus.devices))} if gpus.devices else {}
        self.state = AgentTasks(Resources.of({"cpu": settings.cpus, "memory": settings.memory_bytes, **net, **gpu}),
                                Resources(settings.reserve_cpus, settings.reserve_memory_bytes), gpus.indices)
        self.capacity, self.reserved = self.state.capacity, self.state.reserved
        # The operator's per-task limits: stated at registration, and enforced in _prepare.
        self.ceilings = Ceilings(pids_max=settings.pids_max, log_max_bytes=settings.log_max_bytes)
        self.logs_root = settings.state_dir / "logs"
        self._started: dict[str, Started] = {}
        self._usage: dict[str, tuple[RawUsage | None, int, TaskUsage]] = {}   # key -> (last raw, peak, usage)
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._background: set[asyncio.Task[None]] = set()

    # ---- queries ----

    def free(self) -> Resources:
        return self.state.free()

    def running(self) -> list[Launch]:
        return self.state.live()

    # ---- events in ----

    def feed(self, event: AgentEvent) -> None:
        for action in self.state.handle(event):
            self._do(action)

    def launch(self, request: Launch) -> None:
        if not valid_task_id(request.task_id):
            log.warning("refusing a launch with a malformed task id %r", request.task_id[:40])
            return
        self.feed(LaunchAsked(request, time.time()))

    def kill(self, task_id: str, attempt: int, reason: str, grace_s: float = 0.0) -> None:
        if valid_task_id(task_id):
            self.feed(KillAsked(task_id, attempt, reason, time.time(), grace_s))

    def cut_off(self, seconds: float) -> None:
        self.feed(CutOff(seconds, time.time()))

    # ---- actions out ----

    def _do(self, action: AgentAction) -> None:
        if isinstance(action, Report):
            self.outbox.add(action.report)
        elif isinstance(action, StartContainer):
            self._spawn(self._start(action.request, action.gpus))
        elif isinstance(action, WatchExit):
            self._watch(action.key)
        elif isinstance(action, Signal):
            self._spawn(self._signal(action.key, action.signum))
        elif isinstance(action, ArmGrace):
            self._timers[action.key] = asyncio.get_running_loop().call_later(
                action.grace_s or self.settings.kill_grace_s, self.feed, GraceOver(action.key))
        elif isinstance(action, RemoveContainer):
            self._spawn(self._remove(action.key))

    def _spawn(self, coro: object) -> None:
        task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _start(self, request: Launch, gpus: tuple[int, ...] = ()) -> None:
        try:
            # One thread hop for both (each hop is a handoff and a loop wake-up: ~0.2 ms of a
            # start's ~5, more under load; bench/start_latency.py --breakdown).
            started = await asyncio.to_thread(lambda: self.runtime.start(self._prepare(request, gpus)))
        except (LaunchError, OSError) as error:
            self.feed(LaunchFailed(request.key, str(error), time.time()))
            return
        self._started[request.key] = started
        self.feed(Launched(request.key, started.started_at))

    def _prepare(self, request: Launch, gpus: tuple[int, ...] = ()) -> TaskSpec:
        """The task's directory and launch record (before the container exists: see recover())."""
        assert request.spec is not None
        spec = request.spec
        if spec.resources.memory <= 0 and not self.settings.unlimited_memory:
            raise LaunchError("this node runs no task without a memory limit (tcl-agent --no-unlimited-memory); "
                              "submit with --mem SIZE, e.g. --mem 4G")
        log_dir = logfiles.task_dir(self.logs_root, request.key)
        user = task_user(spec.user, self.settings.default_user, self.settings.allow_root, self.settings.denied_uids)
        save_record(log_dir, request, gpus)
        pids_max, log_max = self._limits(request)
        outputs = prepare_outputs(log_dir, request, user, self.settings.namespaces, self.settings.node)
        return TaskSpec(
            key=request.key, task_id=request.task_id, attempt=request.attempt, command=outputs.command,
            resources=spec.resources, stdout_path=str(log_dir / "stdout"), stderr_path=str(log_dir / "stderr"),
            env=self._env((*spec.env, *task_identity_env(request)), gpus), user=user, workdir=spec.workdir,
            pids_max=pids_max,
            cpu_limit=spec.cpu_limit, swap_bytes=spec.swap, namespaces=self.settings.namespaces,
            log_max_bytes=log_max, image=spec.image,
            network=task_network(spec), net_rate_bps=spec.resources.get("net"), net_ceil_bps=spec.net_limit,
            **self._devices(gpus), submit_dir=spec.submit_dir,
            stdout_file=outputs.stdout_file, stderr_file=outputs.stderr_file, output_append=outputs.append,
            script=outputs.script, lease_path=self._lease_path(request),
        )

    def _lease_path(self, request: Launch) -> str:
        """The fence lease for the tasks the agent's cut_off stops (taskstate.py): those the
        master starts again elsewhere once LOST. The shim enforces it when no agent runs."""
        assert request.spec is not None
        return str(self.settings.state_dir / LAST_HEARD_FILE) if request.spec.retries > 0 else ""

    def _env(self, env: tuple[tuple[str, str], ...], gpus: tuple[int, ...]) -> tuple[tuple[str, str], ...]:
        """The job's environment with the GPU variables the agent owns set over it."""
        ours = visible_env(gpus, bool(self.gpus.devices))
        names = {name for name, _ in ours}
        return tuple((k, v) for k, v in env if k not in names) + ours

    def _devices(self, gpus: tuple[int, ...]) -> dict[str, object]:
        """On a node that offers GPUs every task's device access is confined: its own GPUs
        and the shared control nodes, beside the standard devices. Elsewhere: unchanged."""
        if not self.gpus.devices:
            return {}
        own = self.gpus.by_index(gpus)
        return {"devices": task_rules([(g.major, g.minor) for g in own], self.gpus.shared if own else ()),
                "gpus": gpus, "gpu_paths": tuple(g.path for g in own) + (self.gpus.shared_paths if own else ()),
                "gpu_driver": "nvidia" if self.gpus.source == "nvml" else ""}

    def _limits(self, request: Launch) -> tuple[int, int]:
        """The job's pids and log caps, never above this agent's: the last line of defence
        behind the master's submit check (an older master, a node with a lower ceiling)."""
        assert request.spec is not None
        asked = (request.spec.pids_max, request.spec.log_max_bytes)
        got = (effective(asked[0], self.ceilings.pids_max), effective(asked[1], self.ceilings.log_max_bytes))
        for name, want, have in (("pids_max", asked[0], got[0]), ("log_max_bytes", asked[1], got[1])):
            if want and want != have:
                log.warning("task %s asked %s %d; this node's ceiling is %d: it gets %d",
                            request.key, name, want, have, have)
        return got

    def _watch(self, key: str) -> None:
        started = self._started.get(key)
        if started is None:
            self._spawn(self._collect(key))
            return
        asyncio.get_running_loop().add_reader(started.exit_fd, self._on_exit_readable, key, started.exit_fd)

    def _on_exit_readable(self, key: str, fd: int) -> None:
        asyncio.get_running_loop().remove_reader(fd)
        os.close(fd)
        self._started.pop(key, None)
        self._spawn(self._collect(key))

    async def _collect(self, key: str) -> None:
        status = await asyncio.to_thread(self.runtime.exit_status, key)
        final = await asyncio.to_thread(self.runtime.sample, key)     # memory peak etc. once more
        if final is not None:
            self._update_usage(key, final)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        usage = self._usage.pop(key, (None, 0, None))[2]
        self.feed(Exited(key, status, usage, time.time()))

    async def _signal(self, key: str, signum: int) -> None:
        try:   # off the event loop: a whole-container kill may wait for a freeze to settle
            await asyncio.to_thread(self.runtime.signal, key, signum)
        except OSError as error:
            log.warning("signal %s to %s failed: %s", signum, key, error)

    async def _remove(self, key: str) -> None:
        try:
            await asyncio.to_thread(self.runtime.remove, key)
        except OSError as error:
            log.warning("cannot remove the container of %s yet: %s", key, error)
        logfiles.mark_finished(self.logs_root, key)

    # ---- after an agent restart ----

    async def recover(self) -> None:
        """Re-adopt what a previous run left: watch running containers again, report the
        ones that ended meanwhile, remove what belongs to no launch record. Runs before the
        first registration, so the master hears all of it at once."""
        for key in await asyncio.to_thread(self.runtime.containers):
            request = load_record(self.logs_root / key)
            if request is None or request.key != key:
                log.warning("removing container %s: no launch record belongs to it", key)
                await asyncio.to_thread(self.runtime.remove, key)
                continue
            started = await asyncio.to_thread(self.runtime.adopt, key)
            gpus = load_gpus(self.logs_root / key)
            if started is not None:
                self._started[key] = started
                log.info("re-adopted running task %s%s", key, f" (GPUs {gpus})" if gpus else "")
            else:
                log.info("task %s ended while the agent was away", key)
            self.feed(Adopted(request, gpus))

    # ---- usage ----

    def sample_all(self) -> dict[str, tuple[int, TaskUsage]]:
        """Runs in a worker thread: reads cgroup files only."""
        usage = {}
        for request in self.state.live():
            if request.key not in self._started:
                continue
            raw = self.runtime.sample(request.key)
            if raw is not None:
                self._update_usage(request.key, raw)
            if request.key in self._usage:
                usage[request.task_id] = (request.attempt, self._usage[request.key][2])
        return usage

    def sample_gpus(self) -> tuple[GpuSample, ...]:
        """Runs in a worker thread: NVML's figures of each bound device, as its task's."""
        if self._nvml is None:
            return ()
        by_device = self._nvml.sample()
        out = []
        for index, key in sorted(self.state.held_gpus().items()):
            device = by_device.get(index)
            attempt = self.state.attempts.get(key)
            if device is not None and attempt is not None and key in self._started:
                out.append(GpuSample(attempt.request.task_id, attempt.request.attempt, index, device.util_percent,
                                     device.memory_used_bytes, device.memory_total_bytes))
        return tuple(out)

    def _update_usage(self, key: str, raw: RawUsage) -> None:
        raw = raw if raw.mono else replace(raw, mono=time.monotonic())
        last, peak, _ = self._usage.get(key, (None, 0, TaskUsage()))
        usage = to_task_usage(last, raw, peak)
        self._usage[key] = (raw, usage.memory_peak_bytes, usage)

    # ---- logs ----

    async def read_log(self, task_id: str, stderr: bool, tail_bytes: int, max_bytes: int, follow: bool = False,
                       attempt: int = 0) -> AsyncIterator[bytes]:
        if not valid_task_id(task_id):
            raise FileNotFoundError(f"no logs for task {task_id[:40]!r} on this node")
        log_dir = logfiles.find_dir(self.logs_root, task_id, attempt)
        if log_dir is None:
            raise FileNotFoundError(f"no logs for task {task_id} on this node")
        running = (lambda: log_dir.name in {r.key for r in self.state.live()}) if follow else (lambda: False)
        path, owner = log_source(log_dir, "stderr" if stderr else "stdout")
        async for chunk in logfiles.read(path, tail_bytes, max_bytes, running, owner):
            yield chunk

    def sweep_old_logs(self) -> int:
        live = {r.key for r in self.state.live()}
        return logfiles.sweep(self.logs_root, live, self.settings.task_retention_s, time.time())

    async def settle(self) -> None:
        """Waits for the runtime calls already under way (starts, signals, removals)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def shutdown(self, timeout_s: float = 10.0) -> None:
        """Kills every task (short grace) and waits, bounded, for their exits to be reported."""
        for request in self.state.live():
            self.kill(request.task_id, request.attempt, "agent shut down")
        deadline = time.monotonic() + timeout_s
        while self.state.attempts and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0)


def state_dir_path(path: Path) -> Path:
    """The agent's state directory: root only (launch records hold task environments)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def task_identity_env(request: Launch) -> tuple[tuple[str, str], ...]:
    """Who the task is (README, "Task environment"): these win over the job's own --env."""
    assert request.spec is not None
    federated = federated_identity(request.spec.owner, request.spec.labels, request.job_id)
    env = list(federated) if federated is not None else [
        ("TCL_JOB_ID", request.job_id), ("TCL_TASK_INDEX", str(request.index)),
        ("TCL_TASK_COUNT", str(request.spec.tasks)), ("TCL_ATTEMPT", str(request.attempt))]
    if request.spec.array:          # an array task's index is its array index
        env.append(("TCL_ARRAY_TASK_ID", str(request.index)))
    if request.preemptions:
        env += [("TCL_PREEMPTED", "1"), ("TCL_PREEMPTIONS", str(request.preemptions))]
    return tuple(env)
