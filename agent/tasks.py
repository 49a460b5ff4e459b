"""The agent's tasks: launch into the runtime, watch exits, kill, sample usage, read logs,
and re-adopt what a previous run of the agent left running. Every state change becomes a
TaskReport in the outbox."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator

from tcluster.agent.outbox import Outbox
from tcluster.agent.requests import LaunchRequest, load_request, save_request, task_user
from tcluster.agent.runtime.base import LaunchError, RawUsage, Runtime, Started, TaskSpec
from tcluster.agent.settings import AgentSettings
from tcluster.agent.usage import to_task_usage
from tcluster.model import TaskState, TaskUsage
from tcluster.reports import TaskReport
from tcluster.resources import Resources

log = logging.getLogger(__name__)
_LOG_CHUNK = 64 * 1024

__all__ = ["LaunchRequest", "LocalTask", "TaskManager"]


@dataclass
class LocalTask:
    request: LaunchRequest
    started: Started | None = None
    kill_reason: str = ""
    last_raw: RawUsage | None = None
    peak_seen: int = 0
    usage: TaskUsage = field(default_factory=TaskUsage)


class TaskManager:
    def __init__(self, settings: AgentSettings, runtime: Runtime, outbox: Outbox) -> None:
        self.settings = settings
        self.runtime = runtime
        self.outbox = outbox
        self.capacity = Resources(settings.cpus, settings.memory_bytes)
        self.reserved = Resources(settings.reserve_cpus, settings.reserve_memory_bytes)
        self.tasks: dict[str, LocalTask] = {}       # by task id: the live attempt
        self.log_dirs: dict[str, Path] = {}         # by task id: the latest attempt's logs
        self._kill_timers: dict[str, asyncio.TimerHandle] = {}

    def free(self) -> Resources:
        used = sum((t.request.resources for t in self.tasks.values()), Resources())
        return (self.capacity - self.reserved - used).clamp_nonnegative()

    def running(self) -> list[LaunchRequest]:
        return [t.request for t in self.tasks.values()]

    async def launch(self, request: LaunchRequest) -> None:
        if request.task_id in self.tasks:
            log.info("task %s already runs here; ignoring duplicate launch", request.task_id)
            return
        short = request.resources.shortfall(self.free())
        if short:
            reason = f"not enough {', '.join(short)} free on this node ({self.free().describe()})"
            self._report(request, TaskState.FAILED, reason=reason, rejected=True)
            return
        task = LocalTask(request)
        self.tasks[request.task_id] = task  # holds its resources while starting
        try:
            spec = self._spec(request)
            task.started = await asyncio.to_thread(self.runtime.start, spec)
        except (LaunchError, OSError) as error:
            del self.tasks[request.task_id]
            self._report(request, TaskState.FAILED, reason=str(error))
            return
        self._report(request, TaskState.RUNNING, at=task.started.started_at)
        self._watch(task)
        if task.kill_reason:  # a kill arrived while it was starting
            self.kill(request.task_id, request.attempt, task.kill_reason, self.settings.kill_grace_s)

    def _spec(self, request: LaunchRequest) -> TaskSpec:
        log_dir = self.settings.state_dir / "logs" / request.key
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_dirs[request.task_id] = log_dir
        user = task_user(request.user, self.settings.default_user, self.settings.allow_root)
        save_request(log_dir, request)      # before the container exists: see recover()
        return TaskSpec(
            key=request.key, task_id=request.task_id, attempt=request.attempt, command=request.command,
            resources=request.resources, stdout_path=str(log_dir / "stdout"), stderr_path=str(log_dir / "stderr"),
            env=request.env, user=user, workdir=request.workdir,
            pids_max=request.pids_max or self.settings.pids_max, cpu_limit=request.cpu_limit,
            swap_bytes=request.swap, namespaces=self.settings.namespaces,
        )

    def _watch(self, task: LocalTask) -> None:
        assert task.started is not None
        asyncio.get_running_loop().add_reader(task.started.exit_fd, self._on_exit_readable, task)

    # -- after an agent restart -------------------------------------------------------
    async def recover(self) -> None:
        """Re-adopt the containers a previous run left: watch the running ones again,
        report the ones that ended meanwhile, remove what belongs to no known task. Runs
        before the first registration, so the master hears of all of it at once."""
        keys = await asyncio.to_thread(self.runtime.containers)
        for key in keys:
            request = load_request(self.settings.state_dir / "logs" / key)
            if request is None or request.key != key:
                log.warning("removing container %s: no launch record belongs to it", key)
                await asyncio.to_thread(self.runtime.remove, key)
                continue
            task = LocalTask(request)
            self.log_dirs[request.task_id] = self.settings.state_dir / "logs" / key
            task.started = await asyncio.to_thread(self.runtime.adopt, key)
            self.tasks[request.task_id] = task
            if task.started is None:
                log.info("task %s ended while the agent was away", key)
                await self._finish(task)
            else:
                log.info("re-adopted running task %s", key)
                self._watch(task)

    # -- exits ------------------------------------------------------------------------
    def _on_exit_readable(self, task: LocalTask) -> None:
        assert task.started is not None
        asyncio.get_running_loop().remove_reader(task.started.exit_fd)
        os.close(task.started.exit_fd)
        asyncio.create_task(self._finish(task))

    async def _finish(self, task: LocalTask) -> None:
        key = task.request.key
        status = await asyncio.to_thread(self.runtime.exit_status, key)
        final = await asyncio.to_thread(self.runtime.sample, key)    # memory peak etc. once more
        if final is not None:
            self._update_usage(task, final)
        timer = self._kill_timers.pop(task.request.task_id, None)
        if timer is not None:
            timer.cancel()
        if task.kill_reason:
            state, reason = TaskState.KILLED, task.kill_reason
        elif status.exit_code == 0:
            state, reason = TaskState.SUCCEEDED, ""
        else:
            state, reason = TaskState.FAILED, status.reason or _describe_exit(status.exit_code, status.signal)
        # Reported (and so on disk) before the container and its exit record are removed:
        # an agent killed in between reports it again after its restart, never loses it.
        self._report(task.request, state, exit_code=status.exit_code, signal_=status.signal, reason=reason,
                     at=status.finished_at or time.time(), usage=task.usage)
        try:
            await asyncio.to_thread(self.runtime.remove, key)
        except OSError as error:
            log.warning("cannot remove the container of %s yet: %s", key, error)
        if self.tasks.get(task.request.task_id) is task:
            del self.tasks[task.request.task_id]

    # -- kill -------------------------------------------------------------------------
    def kill(self, task_id: str, attempt: int, reason: str, grace_s: float) -> None:
        """SIGTERM to every process of the task now, SIGKILL to the whole container after
        the grace period."""
        task = self.tasks.get(task_id)
        if task is None or (attempt and task.request.attempt != attempt):
            return
        task.kill_reason = reason or "killed"
        if task.started is None:
            return  # launch() applies it once started
        self._signal(task, signal.SIGTERM)
        if task_id not in self._kill_timers:
            self._kill_timers[task_id] = asyncio.get_running_loop().call_later(
                grace_s, self._signal, task, signal.SIGKILL)

    def _signal(self, task: LocalTask, signum: int) -> None:
        # Off the event loop: a whole-container kill may wait for a freeze to settle.
        asyncio.create_task(self._signal_async(task.request.key, signum))

    async def _signal_async(self, key: str, signum: int) -> None:
        try:
            await asyncio.to_thread(self.runtime.signal, key, signum)
        except OSError as error:
            log.warning("signal %s to %s failed: %s", signum, key, error)

    # -- usage ------------------------------------------------------------------------
    def sample_all(self) -> dict[str, tuple[int, TaskUsage]]:
        usage = {}
        for task_id, task in list(self.tasks.items()):
            if task.started is None:
                continue
            raw = self.runtime.sample(task.request.key)
            if raw is not None:
                self._update_usage(task, raw)
            usage[task_id] = (task.request.attempt, task.usage)
        return usage

    @staticmethod
    def _update_usage(task: LocalTask, raw: RawUsage) -> None:
        task.usage = to_task_usage(task.last_raw, raw, task.peak_seen)
        task.peak_seen = task.usage.memory_peak_bytes
        task.last_raw = raw

    # -- logs -------------------------------------------------------------------------
    async def read_log(self, task_id: str, stderr: bool, tail_bytes: int, max_bytes: int) -> AsyncIterator[bytes]:
        log_dir = self.log_dirs.get(task_id) or self._latest_log_dir(task_id)
        if log_dir is None:
            raise FileNotFoundError(f"no logs for task {task_id} on this node")
        path = log_dir / ("stderr" if stderr else "stdout")
        size = path.stat().st_size if path.exists() else 0
        want = min(size, tail_bytes) if tail_bytes > 0 else size
        offset = size - min(want, max_bytes)
        with open(path, "rb") if path.exists() else open(os.devnull, "rb") as handle:
            handle.seek(offset)
            while chunk := await asyncio.to_thread(handle.read, min(_LOG_CHUNK, size - handle.tell())):
                yield chunk

    def _latest_log_dir(self, task_id: str) -> Path | None:
        """After an agent restart: the highest attempt's directory on disk."""
        root = self.settings.state_dir / "logs"
        candidates = [p for p in root.glob(f"{task_id}.*") if p.name.rpartition(".")[0] == task_id] if root.exists() else []
        return max(candidates, key=lambda p: int(p.name.rpartition(".")[2]), default=None)

    async def shutdown(self, timeout_s: float = 10.0) -> None:
        """Kills every task (short grace) and waits, bounded, for their exits to be reported."""
        for task_id, task in list(self.tasks.items()):
            self.kill(task_id, task.request.attempt, "agent shut down", grace_s=min(self.settings.kill_grace_s, 2.0))
        deadline = time.monotonic() + timeout_s
        while self.tasks and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    def _report(self, request: LaunchRequest, state: TaskState, *, exit_code: int | None = None, signal_: int = 0,
                reason: str = "", at: float = 0.0, usage: TaskUsage | None = None, rejected: bool = False) -> None:
        self.outbox.add(TaskReport(
            task_id=request.task_id, attempt=request.attempt, state=state, exit_code=exit_code, signal=signal_,
            reason=reason, at=at or time.time(), usage=usage, rejected=rejected,
        ))


def _describe_exit(exit_code: int | None, signum: int) -> str:
    if signum:
        try:
            return f"killed by {signal.Signals(signum).name}"
        except ValueError:
            return f"killed by signal {signum}"
    return f"exited with code {exit_code}"
