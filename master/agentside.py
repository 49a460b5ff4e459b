"""The master service's side facing agents (composed into MasterService): their links,
their streams attaching and detaching, their reports becoming events, and a step's
actions going out on their links, one round's launches for one agent in one message."""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from tcluster.wire.features import LAUNCH_BATCH, USAGE_WATCH, batch_by_node
from tcluster.domain.gpuusage import GpuBoard
from tcluster.master.core.execio import ExecPiece
from tcluster.master.core.actions import (
    AckReports, Heartbeat, LaunchBatch, LogPiece, Registration, ReportBatch, WatchUsage,
)
from tcluster.master.core.events import Ack, Action, AgentJoined, AgentLeft, Beat, Disconnect, Launch, Outbound, Reports
from tcluster.master.links import AgentLink
from tcluster.master.core.registration import check_registration
from tcluster.master.ports import Do, Plugins
from tcluster.master.settings import MasterSettings
from tcluster.master.usagewatch import UsageWatches, watch_capacity
from tcluster.domain.model import Job, Task, TaskState

log = logging.getLogger(__name__)


class Agents:
    """The connected agents. `do` is the service's one way to change state; `kick` asks
    for a scheduling round; `acting`: whether this master may send (it leads)."""

    def __init__(self, settings: MasterSettings, do: Do, kick: Callable[[], None], acting: Callable[[], bool],
                 clock: Callable[[], float], monotonic: Callable[[], float], plugins: Plugins) -> None:
        self.settings, self.plugins = settings, plugins
        self._do, self._kick, self._acting = do, kick, acting
        self._clock, self._monotonic = clock, monotonic
        self.links: dict[str, AgentLink] = {}
        self.gpus = GpuBoard()       # the last NVML samples of running tasks' GPUs, per node
        self.usage_watches = UsageWatches(0)   # fresh samples on demand (tcl top, job page, scrape)

    def _batchable(self, action: object) -> str | None:
        """The node of a launch whose agent takes LaunchTasks (else None: sent alone)."""
        if not isinstance(action, Launch):
            return None
        link = self.links.get(action.node)
        return action.node if link is not None and LAUNCH_BATCH in link.features else None

    def send(self, actions: list[Action]) -> None:
        """A durable step's actions (the committer calls this)."""
        if actions and not self._acting():
            log.warning("not leading: %d action(s) dropped", len(actions))
            return
        lotes = self.plugins.lotes
        if lotes is not None:
            actions = [lotes.decorate(a) for a in actions]   # LoTES: a launch's class, a welcome's bin
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

    def broadcast(self, message_for: Callable[[str], Outbound]) -> None:
        """Sends each connected node its own message (LoTES: every node's new bin)."""
        for node, link in list(self.links.items()):
            link.send(message_for(node))

    # ---- streams ----

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
        self._kick()
        return link

    def watch_usage(self, nodes: Iterable[str], for_s: float) -> None:
        """Someone watches these nodes' usage: they report at the heartbeat interval for
        for_s (bounded by the report budget; master/usagewatch.py)."""
        s = self.settings
        self.usage_watches.max_nodes = watch_capacity(s.report_budget_per_s, s.heartbeat_interval_s)
        watched = (n for n in nodes if (link := self.links.get(n)) is not None and USAGE_WATCH in link.features)
        for node in self.usage_watches.ask(watched, self._monotonic(), for_s):
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
            observer, lotes = self.plugins.observer, self.plugins.lotes
            if observer is not None and beat.gpus:     # the job page's GPU charts
                observer.on_gpus(beat.gpus, self._clock())
            if lotes is not None:
                lotes.heartbeat(link.node, beat.class_mix)

    def on_reports(self, link: AgentLink, batch: ReportBatch) -> None:
        if self.links.get(link.node) is not link:
            return
        # Acknowledged only once durable; if the write fails, every stream is dropped and
        # the agent sends them again when it registers.
        self._do(Reports(link.node, batch.reports, batch.last_seq))
        self._kick()

    def on_log_piece(self, link: AgentLink, piece: LogPiece) -> None:
        link.deliver_log(piece)

    def on_exec_piece(self, link: AgentLink, piece: ExecPiece) -> None:
        link.deliver_exec(piece)
