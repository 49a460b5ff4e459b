"""The master's service: the operations the gRPC edge calls, and the background loops
(scheduling rounds, node liveness). Runs on one asyncio loop, so the Cluster needs no
locks; every mutation is persisted by the Cluster before actions go out."""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from typing import AsyncIterator, Callable

from tcluster.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from tcluster.master.actions import (
    AckReports, FetchLog, Heartbeat, Kill, Launch, LogPiece, Registration, ReportBatch, Welcome,
)
from tcluster.master.cluster import Cluster
from tcluster.master.links import AgentLink
from tcluster.master.queues import dominant_share, load_tree, reload_tree, rows
from tcluster.scheduler.round import schedule_round
from tcluster.master.settings import MasterSettings
from tcluster.model import Job, JobSpec, JobState, Node, NodeState, Task, TaskState
from tcluster.scheduler.fairness import make_fairness
from tcluster.scheduler.matching import EligibleCache
from tcluster.scheduler.placement import make_placement
from tcluster.scheduler.queuestats import QueueRow
from tcluster.scheduler.reservations import Reservations

log = logging.getLogger(__name__)
_LOG_PIECE_TIMEOUT_S = 15.0


class MasterService:
    def __init__(self, settings: MasterSettings, cluster: Cluster, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.cluster = cluster
        self.fairness = make_fairness(settings.fairness)
        self.placement = make_placement(settings.placement)
        self.rng = random.Random(settings.seed)
        self.clock = clock
        self.links: dict[str, AgentLink] = {}
        self._wake = asyncio.Event()
        self._eligible = EligibleCache()
        self.queues = load_tree(settings.queues_file)
        self.reservations = Reservations(settings.reserve_after_s)
        self.started_at = clock()

    # ---- jobs ----

    def submit(self, spec: JobSpec) -> tuple[Job, list[Task]]:
        spec.validate()
        self.queues.check_leaf(spec.queue)
        job = self.cluster.submit(spec, self.clock())
        self.kick()
        return self.cluster.job(job.id)

    def get(self, job_id: str) -> tuple[Job, list[Task]]:
        return self.cluster.job(job_id)

    def list_jobs(self, states: set[JobState], queue: str, limit: int) -> list[tuple[Job, list[Task]]]:
        jobs = sorted(self.cluster.jobs.values(), key=lambda j: (j.submitted_at, j.id), reverse=True)
        jobs = [j for j in jobs if (not states or j.state in states) and (not queue or j.spec.queue == queue)]
        return [self.cluster.job(j.id) for j in (jobs[:limit] if limit > 0 else jobs)]

    def cancel(self, job_id: str) -> tuple[Job, list[Task]]:
        _, kills = self.cluster.cancel(job_id, self.clock())
        self._dispatch(kills)
        return self.cluster.job(job_id)

    async def logs(self, job_id: str, index: int, stderr: bool, tail_bytes: int) -> AsyncIterator[bytes]:
        _, tasks = self.cluster.job(job_id)
        if not 0 <= index < len(tasks):
            raise NotFound(f"job {job_id} has no task {index} (it has {len(tasks)})")
        task = tasks[index]
        if not task.node:
            raise FailedPrecondition(f"task {task.id} has not started yet ({task.state.value})")
        link = self.links.get(task.node)
        if link is None:
            raise Unavailable(f"node {task.node} is not connected; its logs stay on that node")
        request_id = secrets.token_hex(8)
        queue = link.open_log(request_id)
        link.send(FetchLog(request_id, task.id, stderr, tail_bytes, self.settings.log_max_bytes))
        try:
            while True:
                piece = await asyncio.wait_for(queue.get(), _LOG_PIECE_TIMEOUT_S)
                if piece.error:
                    raise FailedPrecondition(f"logs of {task.id}: {piece.error}")
                if piece.data:
                    yield piece.data
                if piece.eof:
                    return
        except asyncio.TimeoutError:
            raise Unavailable(f"node {task.node} did not send the logs of {task.id} in time") from None
        finally:
            link.close_log(request_id)

    def nodes(self) -> list[tuple[Node, list[str]]]:
        return [
            (n, sorted(t.id for t in self.cluster.tasks_on(n.name)))
            for n in sorted(self.cluster.nodes.values(), key=lambda n: n.name)
        ]

    # ---- agents ----

    def attach(self, reg: Registration) -> AgentLink:
        _check_registration(reg)
        if reg.node in self.links:
            raise FailedPrecondition(f"node {reg.node!r} is already connected; node names must be unique")
        now = self.clock()
        node = Node(name=reg.node, capacity=(reg.capacity - reg.reserved).clamp_nonnegative(), reserved=reg.reserved,
                    labels=reg.labels, state=NodeState.READY, last_seen=now, runtime=reg.runtime)
        self.cluster.upsert_node(node)
        self.cluster.apply_reports(reg.node, reg.reports, now)
        running = {task_id for task_id, _ in reg.running}
        self.cluster.lose_tasks(reg.node, "the agent no longer runs it", now, keep=running)
        unwanted = tuple(sorted(tid for tid, attempt in reg.running if not self._wanted(tid, attempt, reg.node)))
        link = AgentLink(reg.node)
        self.links[reg.node] = link
        link.send(Welcome(self.settings.heartbeat_interval_s, unwanted))
        if reg.reports:
            link.send(AckReports(reg.last_seq))
        log.info("node %s registered (%s, capacity %s)", reg.node, reg.runtime, node.capacity.describe())
        self.kick()
        return link

    def detach(self, link: AgentLink) -> None:
        link.close()
        if self.links.get(link.node) is link:
            del self.links[link.node]
            self.cluster.mark_down(link.node, self.clock())
            log.info("node %s disconnected", link.node)

    def on_heartbeat(self, link: AgentLink, beat: Heartbeat) -> None:
        self.cluster.touch(link.node, self.clock())
        self.cluster.report_free(link.node, beat.free)
        self.cluster.record_usage(beat.usage)
        self.cluster.flush_usage(link.node)

    def on_reports(self, link: AgentLink, batch: ReportBatch) -> None:
        now = self.clock()
        self.cluster.touch(link.node, now)
        self.cluster.apply_reports(link.node, batch.reports, now)
        link.send(AckReports(batch.last_seq))
        self.kick()

    def on_log_piece(self, link: AgentLink, piece: LogPiece) -> None:
        link.deliver_log(piece)

    def _wanted(self, task_id: str, attempt: int, node: str) -> bool:
        task = self.cluster.task(task_id)
        return task is not None and task.attempt == attempt and task.node == node and task.state.holds_resources

    # ---- background ----

    def kick(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Scheduling rounds on every change (and every schedule_interval_s), plus liveness."""
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.settings.schedule_interval_s)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            try:
                self.check_liveness()
                self.schedule_once()
            except Exception:  # a bug in one round must not stop the master
                log.exception("scheduling round failed")

    def schedule_once(self) -> list[Launch]:
        result = schedule_round(self.cluster.jobs, self.cluster.tasks, self.cluster.matrix,
                                self.fairness, self.placement, self.rng, self._eligible,
                                queues=self.queues, reservations=self.reservations, now=self.clock())
        launches = self.cluster.assign(result.placements, self.clock()) if result.placements else []
        self.cluster.set_pending_reasons(result.pending_reasons)
        self._dispatch(launches)
        return launches

    # ---- queues and shares ----

    def reload_queues(self) -> str:
        """SIGHUP: re-read the queue file; on any error the old tree stays in force."""
        self.queues, message = reload_tree(self.queues, self.settings.queues_file, self.cluster.jobs.values())
        self.kick()
        return message

    def list_queues(self) -> list[QueueRow]:
        return rows(self.queues, self.cluster.jobs, self.cluster.tasks, self.cluster.matrix.total_capacity())

    def dominant_share(self, job: Job, tasks: list[Task]) -> float:
        """Against the total capacity of READY nodes, as the fairness policies see it."""
        return dominant_share(job, tasks, self.cluster.matrix.total_capacity())

    def check_liveness(self) -> None:
        now = self.clock()
        timeout = self.settings.node_timeout_s
        for name, node in list(self.cluster.nodes.items()):
            silent = now - max(node.last_seen, self.started_at)
            if name in self.links and silent > timeout:
                log.warning("node %s silent for %.1fs: marking it DOWN", name, silent)
                self.detach(self.links[name])
            elif name not in self.links:
                down_for = now - max(self.cluster.down_since.get(name, now), self.started_at)
                if down_for > timeout and self.cluster.tasks_on(name):
                    self.cluster.lose_tasks(name, f"node {name} has been down for {down_for:.0f}s", now)
                    self.kick()

    def _dispatch(self, actions: list[Launch] | list[Kill]) -> None:
        for action in actions:
            link = self.links.get(action.node)
            if link is not None:
                link.send(action)


def _check_registration(reg: Registration) -> None:
    if not reg.node:
        raise InvalidArgument("register.node", "is empty")
    for kind, amount in reg.capacity.as_dict().items():
        if amount < 0 or amount != amount:
            raise InvalidArgument(f"register.capacity.{kind}", f"{amount!r} must be >= 0")
