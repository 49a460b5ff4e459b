"""Fresh usage samples on demand (issue 26), sans-IO.

Quiet agents report usage once per usage interval (up to a minute in a big cluster). Where
resolution matters — `tcl top`, an open job page, a Prometheus scrape that names nodes —
the master asks those nodes for samples at the heartbeat interval for a while (a
UsageWatch message). This is the link's pacing, like log credit: nothing persists, a
master restart forgets every watch, and liveness limits never change (a watched node only
reports more often than its interval promised).

The extra reports are bounded: at most `max_nodes` nodes are watched at once (the report
budget's worth at the heartbeat interval), first come first served; a node already watched
gets its watch renewed only once half of it has passed, so a client polling every second
costs one message per node per half window, not one per poll."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from tcluster.domain.errors import InvalidArgument
from tcluster.wire.features import MAX_WATCH_S

DEFAULT_WATCH_S = 30.0       # a job page, a scrape
MAX_SCRAPE_NODES = 1000      # node= parameters one scrape may name


def checked_watch_s(value: float, name: str = "watch_usage_s") -> float:
    """A client's watch length: seconds >= 0 (0: no watch); beyond MAX_WATCH_S is cut to it."""
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(name, f"must be seconds >= 0 (0: no watch; at most {MAX_WATCH_S:.0f} are used), "
                                    f"got {str(value)[:40]}")
    return min(value, MAX_WATCH_S)


def watch_capacity(report_budget_per_s: float, heartbeat_interval_s: float) -> int:
    """How many nodes may report at the heartbeat interval at once within the budget."""
    if report_budget_per_s <= 0:
        return 0
    return max(1, int(report_budget_per_s * heartbeat_interval_s))


@dataclass
class UsageWatches:
    max_nodes: int
    until: dict[str, float] = field(default_factory=dict)     # node -> monotonic end of its watch

    def ask(self, nodes: Iterable[str], now: float, for_s: float) -> list[str]:
        """The nodes to send a UsageWatch(for_s) now: not watched, or past half of their
        watch. Expired watches are dropped first; nodes beyond the cap are left as they are."""
        for_s = min(max(for_s, 0.0), MAX_WATCH_S)
        if for_s <= 0 or self.max_nodes <= 0:
            return []
        self.until = {n: t for n, t in self.until.items() if t > now}
        send: list[str] = []
        for node in dict.fromkeys(nodes):
            current = self.until.get(node)
            if current is None and len(self.until) >= self.max_nodes:
                continue
            if current is not None and current - now > for_s / 2:
                continue
            self.until[node] = now + for_s
            send.append(node)
        return send

    def forget(self, node: str) -> None:
        """The node's stream ended: a new one starts unwatched (the agent forgot it too)."""
        self.until.pop(node, None)
