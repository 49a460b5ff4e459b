"""An agent's wall clock read on the master's (issue 36 #7: a time limit compared the
agent's start time with the master's clock, so a node whose clock ran 5 minutes behind
got 5 more minutes). Each message with the agent's send time (Register, Heartbeat) gives
one sample of master-time-received minus agent-time-sent: the clocks' difference plus
that message's delay. The smallest of the recent samples is the difference plus the
smallest delay (milliseconds on a healthy link); task events' times are moved by it at
the edge, before the transitions see them."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import replace

from tcluster.domain.reports import TaskReport

SAMPLES = 16


class AgentClock:
    def __init__(self) -> None:
        self._offsets: deque[float] = deque(maxlen=SAMPLES)

    def heard(self, sent_at: float, received_at: float) -> None:
        if sent_at > 0 and math.isfinite(sent_at):
            self._offsets.append(received_at - sent_at)

    @property
    def offset_s(self) -> float | None:
        """The master's clock minus the agent's (plus the smallest recent delay)."""
        return min(self._offsets) if self._offsets else None

    def to_master(self, reports: tuple[TaskReport, ...]) -> tuple[TaskReport, ...]:
        offset = self.offset_s
        if offset is None:
            return reports
        return tuple(replace(r, at=r.at + offset) if r.at > 0 else r for r in reports)
