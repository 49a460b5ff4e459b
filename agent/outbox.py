"""Task reports waiting for the master's acknowledgement. Each gets an increasing seq;
the master acks up to a seq once it has persisted them; whatever is unacked is sent
again after a reconnect, so no exit is lost while the master is away."""

from __future__ import annotations

import asyncio

from tcluster.reports import TaskReport


class Outbox:
    def __init__(self) -> None:
        self._seq = 0
        self._unacked: list[tuple[int, TaskReport]] = []
        self._sent_upto = 0
        self.ready = asyncio.Event()

    def add(self, report: TaskReport) -> None:
        self._seq += 1
        self._unacked.append((self._seq, report))
        self.ready.set()

    def unacked(self) -> list[tuple[int, TaskReport]]:
        return list(self._unacked)

    def take_unsent(self) -> list[tuple[int, TaskReport]]:
        """Reports not yet sent on the current connection."""
        self.ready.clear()
        fresh = [(seq, r) for seq, r in self._unacked if seq > self._sent_upto]
        if fresh:
            self._sent_upto = fresh[-1][0]
        return fresh

    def mark_all_sent(self) -> None:
        """After a Register that carried every unacked report."""
        self._sent_upto = self._seq

    def ack(self, seq: int) -> None:
        self._unacked = [(s, r) for s, r in self._unacked if s > seq]
