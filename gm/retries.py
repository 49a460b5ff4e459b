"""Issue 35: a federated job's --retries. A task whose run at an LM ended FAILED or LOST
(not cancelled, not preempted: a preemption is no failure and uses no retry) is placed
again, anywhere in the federation, while it has retries left: PENDING again with one more
attempt (its next run sees TCL_ATTEMPT one higher) and its failures counted in the store,
so a GM restart neither forgets nor repeats them. The LM job itself never retries
(master/features/federation_live.py: retries=0): the GM does, as one job's owner."""

from __future__ import annotations

from typing import Callable, Protocol

from tcluster.gm.store import GMStore, TaskRow
from tcluster.v1 import jobs_pb2

RETRIED_ENDS = frozenset({"FAILED", "LOST"})


class RetryPort(Protocol):
    @property
    def store(self) -> GMStore: ...

    def spec_of(self, job_id: str) -> jobs_pb2.JobSpec: ...

    def enqueue(self, row: TaskRow) -> None: ...


def retry_reason(failures: int, retries: int, reason: str) -> str:
    return f"retry {failures} of {retries} after: {reason}" if reason else f"retry {failures} of {retries}"


def retried(port: RetryPort, task_id: str, state: str, reason: str, cancelling: Callable[[str], bool]) -> bool:
    """True when the ended run is retried (the task waits again); False: the end stands."""
    job_id = task_id.rpartition(".")[0]
    if state not in RETRIED_ENDS or cancelling(job_id):
        return False
    retries = port.spec_of(job_id).retries
    failures = port.store.failures(task_id)
    rows = port.store.tasks("task_id=?", (task_id,))
    if failures >= retries or not rows:
        return False
    port.store.retried(task_id, rows[0].attempt + 1, retry_reason(failures + 1, retries, reason))
    port.enqueue(port.store.tasks("task_id=?", (task_id,))[0])
    return True

