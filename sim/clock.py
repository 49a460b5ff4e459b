"""The event clock every discrete-event loop here runs on (sim/engine.py, sim/queueing.py,
and the Megha lab's sim/federation/sim.py and sparrow.py): events on a heap by time; at
equal times by kind (lower first: each simulator's kinds say what goes first), then by
`tie` (0 unless given), then in the order they were pushed. `now` is the time of the
last event popped."""

from __future__ import annotations

import heapq
from typing import Any, Generic, TypeVar

E = TypeVar("E")


class EventHeap(Generic[E]):
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any, int, E]] = []
        self._seq = 0
        self.now = 0.0

    def push(self, time: float, kind: int, event: E, tie: Any = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, kind, tie, self._seq, event))

    def pop(self) -> tuple[int, E]:
        """The next event and its kind; the clock moves to its time."""
        self.now, kind, _, _, event = heapq.heappop(self._heap)
        return kind, event

    def peek(self) -> float:
        """The next event's time (there must be one)."""
        return self._heap[0][0]

    def __len__(self) -> int:
        return len(self._heap)
