"""The master service's side facing agents (a part of MasterService, split off for size):
their streams attach and detach, their reports become events, and a step's actions go
out on their links, one round's launches for one agent in one message."""

from __future__ import annotations

import logging
from typing import Iterable

from tcluster.features import LAUNCH_BATCH, USAGE_WATCH, batch_by_node
from tcluster.master.core.actions import (
    AckReports, Heartbeat, LaunchBatch, LogPiece, Registration, ReportBatch, WatchUsage,
)
from tcluster.master.core.events import Ack, Action, AgentJoined, AgentLeft, Beat, Disconnect, Launch, Reports
from tcluster.master.links import AgentLink
from tcluster.master.usagewatch import watch_capacity
from tcluster.master.core.registration import check_registration
from tcluster.model import Job, Task, TaskState

log = logging.getLogger(__name__)


class AgentSide:
    """Mixed into MasterService; uses its state, links, _do and settings."""
    links: dict[str, AgentLink]

    def _batchable(self, action: object) -> str | None:
        """The node of a launch whose agent takes LaunchTasks (else None: sent alone)."""
        if not isinstance(action, Launch):
            return None
        link = self.links.get(action.node)
        return action.node if link is not None and LAUNCH_BATCH in link.features else None

    def _send(self, actions: list[Action]) -> None:
        if actions and not self.acting():
            log.warning("not leading: %d action(s) dropped", len(actions))
            return
        if self.lotes is not None:
            actions = [self.lotes.decorate(a) for a in actions]   # LoTES: a launch's class, a welcome's bin
        # One step's launches for one agent go in one message (issue 26).
        for action in batch_by_node(actions, self._batchable, LaunchBatch):
            link = self.links.get(action.node)
            if isinstance(action, Disconnect):
                if link is not None:
                    log.warning("closing the stream of node %s: %s", action.node, action.reason)
                    del self.links[action.node]
                    link.close()
            elif link is not None:
                link.send(AckReports(action.seq, action.usage_interval_s) if isinstance(action, Ack) else action)

    # ---- agents ----

    def attach(self, reg: Registration) -> AgentLink:
        check_registration(reg)
        old = self.links.pop(reg.node, None)
        if old is not None:          # the newest registration wins (the old stream is half-open)
            old.close()
        link = AgentLink(reg.node, reg.features)
        self.links[reg.node] = link
        self.usage_watches.forget(reg.node)     # a new session starts unwatched, on both ends
        step, _ = self._do(AgentJoined(reg))
        log.info("node %s registered (%s, capacity %s)", reg.node, reg.runtime, step.nodes[reg.node].capacity.describe())
        self.kick()
        return link

    def watch_usage(self, nodes: Iterable[str], for_s: float) -> None:
        """Someone watches these nodes' usage: they report at the heartbeat interval for
        for_s (bounded by the report budget; master/usagewatch.py)."""
        s = self.settings
        self.usage_watches.max_nodes = watch_capacity(s.report_budget_per_s, s.heartbeat_interval_s)
        watched = (n for n in nodes if (link := self.links.get(n)) is not None and USAGE_WATCH in link.features)
        for node in self.usage_watches.ask(watched, self.monotonic(), for_s):
            self.links[node].send(WatchUsage(s.heartbeat_interval_s, for_s))

    def watch_jobs(self, pairs: Iterable[tuple[Job, list[Task]]], for_s: float) -> None:
        """A watch on the nodes running these jobs' tasks (tcl top, a Get that asks, a job page)."""
        if for_s > 0:
            self.watch_usage((t.node for _, tasks in pairs for t in tasks
                              if t.node and t.state is TaskState.RUNNING), for_s)

    def detach(self, link: AgentLink) -> None:
        link.close()
        if self.links.get(link.node) is link:
            del self.links[link.node]
            self.usage_watches.forget(link.node)
            self.gpus.forget(link.node)
            self._do(AgentLeft(link.node))
            log.info("node %s disconnected", link.node)

    def on_heartbeat(self, link: AgentLink, beat: Heartbeat) -> None:
        if self.links.get(link.node) is link:
            self._do(Beat(link.node, beat.free, beat.usage))
            self.gpus.update(link.node, beat.gpus)
            if self.observer is not None and beat.gpus:     # the job page's GPU charts
                self.observer.on_gpus(beat.gpus, self.clock())
            if self.lotes is not None:
                self.lotes.heartbeat(link.node, beat.class_mix)

    def on_reports(self, link: AgentLink, batch: ReportBatch) -> None:
        if self.links.get(link.node) is not link:
            return
        # Acknowledged only once durable; if the write fails, every stream is dropped and
        # the agent sends them again when it registers.
        self._do(Reports(link.node, batch.reports, batch.last_seq))
        self.kick()

    def on_log_piece(self, link: AgentLink, piece: LogPiece) -> None:
        link.deliver_log(piece)
