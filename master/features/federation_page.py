"""What the dashboard's federation page shows when this master is an LM of a federation
(issue 35, part D): the GMs subscribed now (index, name, how old the view they hold is), the
Places in progress and the room promised to tasks that wait for their node, and how Places
were answered since this master started leading. GET /api/v1/federation returns it; the page
is `#/federation` (master/web/static/app.js)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Protocol, Sequence

from tcluster.federation.messages import (Inconsistent, PreemptAndLaunch, Refused, RepartitionAndLaunch, Request,
                                          TaskLaunched)
from tcluster.master.features.federation_lm import FederationLM
from tcluster.master.ports import MasterPort


@dataclass
class PlaceCounters:
    """Answers given to Places since this master started leading (a repeat counts again)."""

    launches: int = 0              # in the GM's own partition
    repartitions: int = 0          # room carved out of another GM's partition
    preemptions: int = 0           # victims stopped, then launched
    refused: int = 0               # another epoch: the GM gets the current state
    inconsistencies: int = 0       # the GM's view was wrong (unknown node, not its partition, no room)
    in_flight: int = 0             # Places being answered now

    def count(self, request: Request, answer: object) -> None:
        if isinstance(answer, TaskLaunched):
            if isinstance(request, PreemptAndLaunch):
                self.preemptions += 1
            elif isinstance(request, RepartitionAndLaunch):
                self.repartitions += 1
            else:
                self.launches += 1
        elif isinstance(answer, Inconsistent):
            self.inconsistencies += 1
        elif isinstance(answer, Refused):
            self.refused += 1


class LMView(Protocol):
    """What the page reads of master/features/federation_live.py's LiveLM (a Protocol: that
    module imports this one for PlaceCounters)."""

    @property
    def master(self) -> MasterPort: ...
    @property
    def fed(self) -> FederationLM: ...
    @property
    def counters(self) -> PlaceCounters: ...
    @property
    def interval_s(self) -> float: ...
    @property
    def subscriptions(self) -> Sequence[Any]: ...     # Subscription: gm, name, last_full, queue, closed
    @property
    def stopping(self) -> Mapping[str, Any]: ...
    @property
    def fed_jobs(self) -> Mapping[str, str]: ...


def federation_doc(lm: LMView | None) -> dict[str, Any]:
    """The page's JSON: {"federation": false} on a master that is no LM."""
    if lm is None:
        return {"federation": False}
    now = lm.master.monotonic()
    live = lm.fed.live
    counters = lm.counters
    answers = {k: v for k, v in asdict(counters).items() if k != "in_flight"}
    return {
        "federation": True,
        "lm": {"index": lm.fed.lm, "name": lm.fed.name, "epoch": live.epoch, "nodes": len(live.names),
               "gms": lm.fed.gms, "state_interval_s": lm.interval_s},
        "gms": [{"index": sub.gm, "name": sub.name, "view_age_s": round(max(0.0, now - sub.last_full), 3),
                 "backlog": sub.queue.qsize(), "closed": sub.closed}
                for sub in sorted(lm.subscriptions, key=lambda s: (s.gm, s.name))],
        "pending": {"places": counters.in_flight,
                    "waiting_for_node": sum(len(w) for w in lm.fed.waiting.values()),
                    "victims_stopping": len(lm.stopping)},
        "running_tasks": len(lm.fed_jobs),
        "answers": answers,
    }
