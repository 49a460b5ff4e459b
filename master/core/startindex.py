"""When each STARTING task began its launch, ordered by that time (issue 11, step 6).

The tick looks for launches older than the start timeout. Visiting every STARTING task
twice a second cost 109 ms a tick with ~11,000 of them behind a saturated master; their
start times are not monotonic in insertion order (a launch takes its node's last-seen
time), so they are kept in a heap, with lazy deletion: an entry counts only while its
task still has that start (same sequence number). Once past the timeout at a tick, a
task moves to `overdue` (`settle`, called from MasterState.apply), where later ticks see
it again (its node may be disconnected, or its kill is on its way) until it leaves
STARTING. A tick thus costs O(overdue + newly expired), not O(STARTING).

Memory only, no clocks: times are the monotonic seconds the steps carry."""

from __future__ import annotations

import heapq
from collections.abc import Iterator


class StartIndex:
    def __init__(self) -> None:
        self.since: dict[str, float] = {}            # task id -> start of its launch (monotonic)
        self._seq: dict[str, int] = {}               # ... and its order of insertion
        self._heap: list[tuple[float, int, str]] = []  # (since, seq, task id); stale entries stay until popped
        self._overdue: dict[str, int] = {}           # past the timeout at a settled tick -> seq
        self._next = 0

    def __len__(self) -> int:
        return len(self.since)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self.since

    def add(self, task_id: str, since: float) -> None:
        """A task began STARTING at `since`; a task already STARTING keeps its start."""
        if task_id in self.since:
            return
        self.since[task_id], self._seq[task_id] = since, self._next
        heapq.heappush(self._heap, (since, self._next, task_id))
        self._next += 1

    def discard(self, task_id: str) -> None:
        if self.since.pop(task_id, None) is not None:
            del self._seq[task_id]
            self._overdue.pop(task_id, None)

    def _valid(self, seq: int, task_id: str) -> bool:
        return self._seq.get(task_id) == seq

    def due(self, now: float, limit: float) -> list[tuple[str, float]]:
        """(task id, since) of every task with now - since > limit, in the order the tasks
        began STARTING (as iterating `since` would give them). Reads only: the overdue
        ones and the heap's expired top, found by walking down from the root only below
        expired entries (a heap's children are never earlier than their parent)."""
        since = self.since
        found = [(seq, task_id) for task_id, seq in self._overdue.items() if now - since[task_id] > limit]
        found.extend((seq, task_id) for seq, task_id in self._expired(now, limit) if self._valid(seq, task_id))
        found.sort()
        return [(task_id, since[task_id]) for _, task_id in found]

    def _expired(self, now: float, limit: float) -> Iterator[tuple[int, str]]:
        heap, stack = self._heap, [0] if self._heap else []
        while stack:
            i = stack.pop()
            since, seq, task_id = heap[i]
            if now - since <= limit:          # the same test as the tick's, float for float
                continue
            yield seq, task_id
            stack.extend(c for c in (2 * i + 1, 2 * i + 2) if c < len(heap))

    def settle(self, now: float, limit: float) -> None:
        """After a tick at `now`: its expired entries leave the heap for `overdue` (stale
        ones are dropped), so the next tick starts below them."""
        heap = self._heap
        while heap and now - heap[0][0] > limit:
            _, seq, task_id = heapq.heappop(heap)
            if self._valid(seq, task_id):
                self._overdue[task_id] = seq
        if len(heap) > 2 * len(self.since) + 64:     # many launches came and went: drop their stale entries
            self._heap = [e for e in heap if self._valid(e[1], e[2])]
            heapq.heapify(self._heap)
