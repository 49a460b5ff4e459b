"""When each running task reaches its time limit (`--time-limit`), in a heap.

The tick asks for the attempts past their deadline (`due`, read-only: transitions are
pure); `settle`, called from MasterState.apply, drops them once the tick's step has
turned them into kill intents (persisted, resent until the end arrives). Entries of
attempts that ended or restarted stay until popped and are skipped. A tick costs
O(due), not O(running). Unix seconds: a limit is wall time, as users read it."""

from __future__ import annotations

import heapq


class DeadlineIndex:
    def __init__(self) -> None:
        self._heap: list[tuple[float, str, int]] = []    # (deadline, task id, attempt)

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, task_id: str, attempt: int, deadline: float) -> None:
        heapq.heappush(self._heap, (deadline, task_id, attempt))

    def due(self, now: float) -> list[tuple[str, int, float]]:
        """(task id, attempt, deadline) of every entry at or before `now`, earliest first."""
        found, stack = [], [0]
        while stack:               # entries <= now form a subtree from the root of the heap
            i = stack.pop()
            if i < len(self._heap) and self._heap[i][0] <= now:
                deadline, task_id, attempt = self._heap[i]
                found.append((task_id, attempt, deadline))
                stack += [2 * i + 1, 2 * i + 2]
        return sorted(found, key=lambda e: (e[2], e[0]))

    def settle(self, now: float) -> None:
        while self._heap and self._heap[0][0] <= now:
            heapq.heappop(self._heap)
