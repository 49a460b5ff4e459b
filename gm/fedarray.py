"""Issue 35: a federated job's `--array` with its throttle (`--array 0-15%4`), as a local
array. Each index is one task of the federated job (task id <job>.<index>), so it runs with
TCL_TASK_INDEX (and TCL_ARRAY_TASK_ID) = its array index on whichever LM runs it. The GM
places at most the throttle's count of the job's tasks at once: the others are held here,
out of the pure GM's queues, and one is let in each time an admitted task ends for good (a
preempted or retried task stays admitted: it waits in the GM's queue). After a restart the
admitted ones are those placing or running plus the first pending up to the throttle."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from tcluster.domain.arrays import parse_array
from tcluster.domain.errors import TclusterError
from tcluster.gm.store import TaskRow
from tcluster.v1 import jobs_pb2

def array_indexes(spec: jobs_pb2.JobSpec, max_tasks: int) -> tuple[list[int], int] | str:
    """(the indexes, the throttle; 0: none) of an array spec, or what is wrong, naming the
    field: the master's syntax, at most `max_tasks` indexes (the GM keeps a row per task),
    a throttle no larger than the array and than int32."""
    try:
        indexes, throttle = parse_array(spec.array, "spec.array")
    except (TclusterError, ValueError) as error:
        return str(error)            # names spec.array already
    count = len(indexes)
    if count > max_tasks:
        return f"spec.array: {count} indexes; a federated job has at most {max_tasks} tasks"
    if throttle > count:
        return (f"spec.array: %{throttle} is more than the array's {count} indexes "
                f"(the throttle is at most the array's size)")
    values = sorted(indexes)         # each at most 99,999,999 (the master's rule): an int32
    if spec.tasks > 1:
        return "spec.tasks: an array's task count is its indexes'; drop --tasks or --array"
    return values, throttle


def throttle_of(spec: jobs_pb2.JobSpec) -> int:
    """The throttle of a stored (checked) spec; 0: none."""
    if not spec.array:
        return 0
    try:
        return parse_array(spec.array)[1]
    except (TclusterError, ValueError):
        return 0


@dataclass
class _Held:
    limit: int
    admitted: set[str]
    waiting: deque[str] = field(default_factory=deque)


class ArrayThrottle:
    """Task ids held back per throttled job; the daemon enqueues what admit/ended return."""

    def __init__(self) -> None:
        self.jobs: dict[str, _Held] = {}

    def admit(self, job_id: str, limit: int, active: list[str], pending: list[TaskRow]) -> list[TaskRow]:
        """Of `pending` (in index order), those to queue now; `active`: the job's tasks
        already placing or running. The rest wait for an admitted one to end."""
        if limit <= 0:
            return pending
        free = max(limit - len(active), 0)
        now, later = pending[:free], pending[free:]
        if later:
            self.jobs[job_id] = _Held(limit, {*active, *(r.task_id for r in now)},
                                      deque(r.task_id for r in later))
        return now

    def ended(self, task_id: str, pending: Callable[[str], bool]) -> str | None:
        """An end for good (not a retry, not a preemption) of `task_id`: the held task to
        queue in its place, if any. Held ids no longer `pending` (cancelled while held) are
        passed over."""
        job_id = task_id.rpartition(".")[0]
        held = self.jobs.get(job_id)
        if held is None or task_id not in held.admitted:
            return None
        held.admitted.discard(task_id)
        let_in = None
        while held.waiting and let_in is None and len(held.admitted) < held.limit:
            candidate = held.waiting.popleft()
            if pending(candidate):
                held.admitted.add(candidate)
                let_in = candidate
        if not held.waiting:
            del self.jobs[job_id]
        return let_in

    def held(self) -> int:
        return sum(len(h.waiting) for h in self.jobs.values())
