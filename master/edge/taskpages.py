"""A job's task rows in replies that always fit (issue 36): Get and List send at most
INLINE_TASK_ROWS rows of a job (its unfinished ones first) and, past that, every row's
index as ranges per state ("0-4,7,9-999"); GetJobTasks pages through the full rows by
index and by bytes. Before, a 100,000-task array's Get carried every row (~7 MB against
the 4 MiB message bound) and failed, and a running array's reply grew with each finished
index. Pure functions of the rows: the servicer encodes, this decides what goes in."""

from __future__ import annotations

from collections import defaultdict

from tcluster.domain.arrays import IndexSet
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import Task, TaskState
from tcluster.v1 import jobs_pb2
from tcluster.wire.protobuf import task_state_to_pb, task_to_pb

INLINE_TASK_ROWS = 1000        # rows Get / List send inline; more: ranges and GetJobTasks
REPLY_BYTE_BUDGET = 3 * 2**20  # one job's message, well under the 4 MiB bound
DEFAULT_TASK_PAGE = 1000
MAX_TASK_PAGE = 5000
STATE_ORDER = tuple(TaskState)


def inline_rows(tasks: list[Task]) -> list[Task]:
    """All rows of a small job; of a big one the first INLINE_TASK_ROWS, unfinished first
    (those a user acts on), each group by index."""
    if len(tasks) <= INLINE_TASK_ROWS:
        return tasks
    ordered = sorted(tasks, key=lambda t: (t.state.terminal, t.index))
    return sorted(ordered[:INLINE_TASK_ROWS], key=lambda t: t.index)


def add_ranges(msg: jobs_pb2.Job, tasks: list[Task]) -> None:
    """Marks `msg` (encoded from inline_rows) compact and adds each state's index ranges;
    if the message would still pass REPLY_BYTE_BUDGET, keeps the counts and drops the ranges."""
    if len(tasks) <= INLINE_TASK_ROWS:
        return
    by_state: dict[TaskState, list[int]] = defaultdict(list)
    for task in tasks:
        by_state[task.state].append(task.index)
    msg.tasks_compact, msg.task_rows = True, len(tasks)
    for state in (s for s in STATE_ORDER if s in by_state):
        msg.task_ranges.add(state=task_state_to_pb(state), indexes=IndexSet.of(by_state[state]).text(),
                            count=len(by_state[state]))
    msg.compact_note = (f"{len(msg.tasks)} of {len(tasks)} task rows shown (unfinished first); "
                        "all of them: tcl status --all-tasks")
    if msg.ByteSize() > REPLY_BYTE_BUDGET:
        size = msg.ByteSize()
        for ranges in msg.task_ranges:
            ranges.indexes = ""
        msg.compact_note += f"; the index ranges ({size} bytes) do not fit a reply: counts only"


def checked_page_args(start_index: int, limit: int) -> int:
    """The page size; InvalidArgument naming the field for values out of range."""
    if start_index < 0:
        raise InvalidArgument("start_index", f"{start_index} is negative; allowed 0 or more")
    if limit < 0 or limit > MAX_TASK_PAGE:
        raise InvalidArgument("limit", f"{limit} is out of range; allowed 0..{MAX_TASK_PAGE} (0: {DEFAULT_TASK_PAGE})")
    return limit or DEFAULT_TASK_PAGE


def tasks_page(tasks: list[Task], start_index: int, limit: int,
               budget: int = REPLY_BYTE_BUDGET) -> jobs_pb2.JobTasksPage:
    """Rows with index >= start_index, by index, at most `limit` of them and cut where the
    page's bytes would pass `budget` (never fewer than one row)."""
    size = checked_page_args(start_index, limit)
    rows = sorted((t for t in tasks if t.index >= start_index), key=lambda t: t.index)
    page, used = jobs_pb2.JobTasksPage(total=len(tasks)), 0
    for n, task in enumerate(rows[:size]):
        message = task_to_pb(task)
        used += message.ByteSize() + 8
        if n and used > budget:
            page.more, page.next_start_index = True, task.index
            return page
        page.tasks.append(message)
    if len(rows) > size:
        page.more, page.next_start_index = True, rows[size].index
    return page
