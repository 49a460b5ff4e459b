"""What each queue's running tasks use now, for the cluster and queue series (every 2 s).

Summing every running task's newest sample task by task (a dict lookup and a protobuf
read each) held the master's loop ~50 ms at 20,000 tasks, every sample (issue 38's
profile: `dash.sample`). Here the recorder's drain writes each slot's newest CPU and
working set into two arrays as it ingests a heartbeat (one fancy-indexed assignment), and
a sample is one `bincount` per figure over the live slots, by queue code; the queues'
paths are rolled up to their parents in Python, once per queue.

A drain ingests its heartbeats before its task ends, so an end can come after a sample of
the task's next attempt (requeued, placed again and reporting within one drain): each
slot keeps the attempt of its newest sample, and an end stops only an attempt up to its own."""

from __future__ import annotations

import numpy as np

from tcluster.master.usage.ingest import group


class LiveUsage:
    """Per task slot: its queue (a code), whether its task runs and has reported in this
    attempt, the attempt of its newest sample, and that sample's CPU (cores) and working
    set (bytes)."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}        # queue path -> code, in order of first sight
        self.queue = np.zeros(0, dtype=np.int64)
        self.live = np.zeros(0, dtype=bool)
        self.attempt = np.zeros(0, dtype=np.int64)
        self.cpu = np.zeros(0)
        self.memory = np.zeros(0)

    def grow(self, capacity: int) -> None:
        extra = capacity - len(self.live)
        if extra > 0:
            self.queue = np.concatenate([self.queue, np.zeros(extra, dtype=np.int64)])
            self.live = np.concatenate([self.live, np.zeros(extra, dtype=bool)])
            self.attempt = np.concatenate([self.attempt, np.zeros(extra, dtype=np.int64)])
            self.cpu = np.concatenate([self.cpu, np.zeros(extra)])
            self.memory = np.concatenate([self.memory, np.zeros(extra)])

    def assign(self, slot: int, queue: str) -> None:
        """A task's record took `slot` (grown to the rings' capacity first, a block at a
        time: not one slot at a time): nothing counts until its first sample."""
        self.queue[slot] = self._codes.setdefault(queue, len(self._codes))
        self.live[slot] = False
        self.attempt[slot] = 0

    def sampled(self, slots: np.ndarray, attempts: np.ndarray, cpu: np.ndarray, memory: np.ndarray) -> None:
        """A drain's samples, oldest first: where a slot comes twice, its newest is kept
        (numpy does not promise which of repeated indices an assignment keeps)."""
        order, _, last = group(slots)
        if order is not None:
            keep = order[last]
            slots, attempts, cpu, memory = slots[keep], attempts[keep], cpu[keep], memory[keep]
        self.cpu[slots] = cpu
        self.memory[slots] = memory
        self.attempt[slots] = attempts
        self.live[slots] = True

    def stopped(self, slot: int, attempt: int | None = None) -> None:
        """Attempt `attempt` of the slot's task ended (None: the slot was given back): it
        uses nothing until it reports again, unless a later attempt reported already."""
        if 0 <= slot < len(self.live) and (attempt is None or self.attempt[slot] <= attempt):
            self.live[slot] = False

    def reported_after(self, slot: int, attempt: int) -> bool:
        """Whether the slot's newest sample is of an attempt after `attempt`."""
        return 0 <= slot < len(self.live) and bool(self.attempt[slot] > attempt)

    def by_queue(self) -> dict[str, tuple[float, float]]:
        """Queue path -> (CPU, working set) of its running tasks and its descendants'."""
        if not self._codes:
            return {}
        n = len(self._codes)
        codes = self.queue[self.live]
        cpu = np.bincount(codes, weights=self.cpu[self.live], minlength=n).tolist()
        memory = np.bincount(codes, weights=self.memory[self.live], minlength=n).tolist()
        used: dict[str, tuple[float, float]] = {}
        for path, code in self._codes.items():
            parts = path.split(".")
            for depth in range(1, len(parts) + 1):     # a queue holds what its children hold
                prefix = ".".join(parts[:depth])
                c, m = used.get(prefix, (0.0, 0.0))
                used[prefix] = (c + cpu[code], m + memory[code])
        return used
