"""`tcl exec` on the master: who may (the job's owner or an admin, audited with the command),
into which task (a RUNNING one, on a connected node whose agent takes execs), then the
relay (master/execrelay.py) under the per-task and per-user caps."""

from __future__ import annotations

import shlex
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


def _task(service: Any, caller: Caller, opened: ExecOpened) -> Task:
    job, tasks = service.read(opened.job_id, caller)
    task: Task | None = next((t for t in tasks if t.index == opened.task_index), None)
    command = shlex.join(opened.command)[:AUDITED_COMMAND_CHARS]
    task_name = task.id if task is not None else f"{opened.job_id}.{opened.task_index}"
    service.gate.check(caller, ExecInTask(job.id, task_name, job.spec.owner, command))
    if task is None:
        if opened.task_index in job.unplaced:
            raise not_running(task_name, TaskState.PENDING.value)
        raise NotFound(f"job {job.id} has no task {opened.task_index} (it has {job.spec.tasks}"
                       f"{': ' + job.spec.array if job.spec.array else ''})")
    if task.state is not TaskState.RUNNING:
        raise not_running(task.id, task.state.value)
    return task


async def exec_in_task(service: Any, cap: ExecCap, caller: Caller, opened: ExecOpened,
                       inputs: AsyncIterator[ExecInput]) -> AsyncIterator[ExecOutput]:
    check_opened(opened)
    task = _task(service, caller, opened)
    link = service.agents.links.get(task.node)
    if link is None:
        raise Unavailable(f"node {task.node} is not connected; task {task.id} cannot be reached now")
    if EXEC not in link.features:
        raise FailedPrecondition(f"the agent on node {task.node} does not take execs (an older tcl-agent); "
                                 "upgrade it")
    start = StartExec(new_exec_id(), task.id, task.attempt, opened.command, opened.tty, opened.rows, opened.cols,
                      EXEC_WINDOW, opened.term)
    with cap.hold(caller.name, task.id):
        async for out in relay(link, cap, start, inputs):
            yield out
