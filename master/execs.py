"""`tcl exec` on the master: who may (the job's owner or an admin, audited with the command),
into which task (a RUNNING one, on a connected node whose agent takes execs), then the
relay (master/execrelay.py) under the per-task and per-user caps."""

from __future__ import annotations

import asyncio
import shlex
import time
from collections.abc import AsyncIterator
from typing import Any

from tcluster.domain.errors import FailedPrecondition, NotFound, Unavailable
from tcluster.domain.model import Task, TaskState
from tcluster.master.core.execio import StartExec
from tcluster.master.execrelay import (
    EXEC_WINDOW, ExecCap, ExecInput, ExecOpened, ExecOutput, check_opened, new_exec_id, not_running, relay,
)
from tcluster.security.authz import Caller, ExecInTask
from tcluster.wire.features import EXEC

AUDITED_COMMAND_CHARS = 200
STARTING_WAIT_S = 30.0           # `tcl submit` then `tcl exec`: a STARTING task is waited for, not refused
STARTING_POLL_S = 0.2


def _task(service: Any, caller: Caller, opened: ExecOpened) -> Task:
    """The task, its owner's (or an admin's) to exec into (checked and audited once);
    refused unless RUNNING or STARTING."""
    job, tasks = service.read(opened.job_id, caller)
    task = next((t for t in tasks if t.index == opened.task_index), None)
    command = shlex.join(opened.command)[:AUDITED_COMMAND_CHARS]
    task_name = task.id if task is not None else f"{opened.job_id}.{opened.task_index}"
    service.gate.check(caller, ExecInTask(job.id, task_name, job.spec.owner, command))
    if task is None:
        if opened.task_index in job.unplaced:
            raise not_running(task_name, TaskState.PENDING.value)
        raise NotFound(f"job {job.id} has no task {opened.task_index} (it has {job.spec.tasks}"
                       f"{': ' + job.spec.array if job.spec.array else ''})")
    if task.state not in (TaskState.RUNNING, TaskState.STARTING):
        raise not_running(task.id, task.state.value)
    return task


async def _running(service: Any, found: Task) -> Task:
    """The task once RUNNING: one still STARTING (its container being made, its image
    pulled) is waited for up to STARTING_WAIT_S, as a user who just submitted expects."""
    deadline = time.monotonic() + STARTING_WAIT_S
    task: Task | None = found
    while task is not None and task.state is TaskState.STARTING and time.monotonic() < deadline:
        await asyncio.sleep(STARTING_POLL_S)
        task = service.state.task(found.id)     # the one row: not the whole job per poll
    if task is None or task.state is not TaskState.RUNNING:
        raise not_running(found.id, task.state.value if task is not None else TaskState.PENDING.value)
    return task


async def exec_in_task(service: Any, cap: ExecCap, caller: Caller, opened: ExecOpened,
                       inputs: AsyncIterator[ExecInput]) -> AsyncIterator[ExecOutput]:
    check_opened(opened)
    found = _task(service, caller, opened)
    # Held from here: a wait for a STARTING task counts against --execs-per-user and
    # --execs-per-task as an open exec does, so one user cannot stack up waits.
    with cap.hold(caller.name, found.id):
        task = await _running(service, found)
        link = service.agents.links.get(task.node)
        if link is None:
            raise Unavailable(f"node {task.node} is not connected; task {task.id} cannot be reached now")
        if EXEC not in link.features:
            raise FailedPrecondition(f"the agent on node {task.node} does not take execs (an older tcl-agent); "
                                     "upgrade it")
        start = StartExec(new_exec_id(), task.id, task.attempt, opened.command, opened.tty, opened.rows,
                          opened.cols, EXEC_WINDOW, opened.term)
        async for out in relay(link, cap, start, inputs):
            yield out
