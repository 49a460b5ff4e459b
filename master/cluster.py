"""The master's state: jobs, tasks and nodes in memory, mirrored to the store.

Every change goes through a method here, is written to the store first, and comes back
as actions (launch, kill) for the I/O layer to carry out. No grpc, no clocks: `now` is
always passed in."""

from __future__ import annotations

import logging
import secrets
from dataclasses import replace
from typing import Iterable

from tcluster.errors import FailedPrecondition, InvalidArgument, NotFound
from tcluster.lifecycle import can_transition, job_state
from tcluster.master.actions import Kill, Launch, TaskReport
from tcluster.master.store import Store
from tcluster.model import Job, JobSpec, Node, NodeState, Task, TaskState, TaskUsage
from tcluster.resources import Resources
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.reasons import never_fits_reason

log = logging.getLogger(__name__)


class Cluster:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.jobs: dict[str, Job] = {j.id: j for j in store.load_jobs()}
        self.tasks: dict[str, list[Task]] = {job_id: [] for job_id in self.jobs}
        for task in store.load_tasks():
            self.tasks[task.job_id].append(task)
        self.nodes: dict[str, Node] = {n.name: n for n in store.load_nodes()}
        self.connected: set[str] = set()          # nodes with a live stream
        self.down_since: dict[str, float] = {}    # for LOST after the timeout
        # Free resources per node for placement, updated incrementally; a node is
        # schedulable only while READY and connected.
        self.matrix = NodeMatrix()
        self.by_node: dict[str, set[str]] = {}    # node -> ids of tasks holding resources there
        for node in self.nodes.values():
            self.matrix.upsert(node.name, node.capacity, dict(node.labels), schedulable=False)
        for task in (t for ts in self.tasks.values() for t in ts if t.state.holds_resources):
            self._hold(task)

    # ---- queries ----

    def job(self, job_id: str) -> tuple[Job, list[Task]]:
        if job_id not in self.jobs:
            raise NotFound(f"job {job_id!r} not found")
        return self.jobs[job_id], list(self.tasks[job_id])

    def task(self, task_id: str) -> Task | None:
        job_id, _, index = task_id.rpartition(".")
        tasks = self.tasks.get(job_id)
        if tasks is None or not index.isdigit() or int(index) >= len(tasks):
            return None
        return tasks[int(index)]

    def tasks_on(self, node: str) -> list[Task]:
        tasks = (self.task(task_id) for task_id in sorted(self.by_node.get(node, ())))
        return [t for t in tasks if t is not None]

    def free(self, node: Node) -> Resources:
        return self.matrix.free(node.name)

    def has_schedulable_nodes(self) -> bool:
        return bool(self.matrix.view().schedulable.any())

    # ---- jobs ----

    def submit(self, spec: JobSpec, now: float) -> Job:
        spec.validate()
        reason = never_fits_reason(spec.resources, [(n.name, n.capacity) for n in self.nodes.values()])
        if reason:
            raise InvalidArgument("", reason)
        job_id = secrets.token_hex(4)
        while job_id in self.jobs:
            job_id = secrets.token_hex(4)
        pending = "waiting to be scheduled" if self.has_schedulable_nodes() else "no nodes are ready"
        job = Job(id=job_id, spec=spec, submitted_at=now, pending_reason=pending)
        tasks = [Task(job_id=job_id, index=i) for i in range(spec.tasks)]
        self.store.write(jobs=[job], tasks=tasks)
        self.jobs[job_id], self.tasks[job_id] = job, tasks
        return job

    def cancel(self, job_id: str, now: float) -> tuple[Job, list[Kill]]:
        job, tasks = self.job(job_id)
        if job.state.terminal and not job.cancelled:
            raise FailedPrecondition(f"job {job_id} already ended: {job.state.value}")
        kills = [Kill(t.node, t.id, t.attempt, "cancelled") for t in tasks if t.state.holds_resources]
        changed = [
            replace(t, state=TaskState.KILLED, reason="cancelled before it started", finished_at=now)
            for t in tasks if t.state is TaskState.PENDING
        ]
        self._commit(changed, now, cancel=job_id)
        return self.jobs[job_id], kills

    def set_pending_reasons(self, reasons: dict[str, str]) -> None:
        changed = [replace(self.jobs[j], pending_reason=r) for j, r in reasons.items()
                   if j in self.jobs and self.jobs[j].pending_reason != r]
        if changed:
            self.store.write(jobs=changed)
            self.jobs.update({j.id: j for j in changed})

    # ---- placement results ----

    def assign(self, placements: Iterable[tuple[Task, str]], now: float) -> list[Launch]:
        """Marks tasks STARTING on their nodes (one transaction) and returns the launches."""
        changed = [replace(t, state=TaskState.STARTING, node=node, attempt=t.attempt + 1, reason="")
                   for t, node in placements]
        self._commit(changed, now)
        return [Launch(t.node, t.id, t.job_id, t.index, t.attempt, self.jobs[t.job_id].spec) for t in changed]

    # ---- agent reports ----

    def apply_reports(self, node: str, reports: Iterable[TaskReport], now: float) -> None:
        changed: dict[str, Task] = {}
        for report in reports:
            current = changed.get(report.task_id) or self.task(report.task_id)
            if current is None or current.attempt != report.attempt or current.node != node:
                log.info("ignoring stale report %s attempt %s from %s", report.task_id, report.attempt, node)
                continue
            updated = _apply_report(current, report, node)
            if updated is not None:
                changed[updated.id] = updated
        self._commit(changed.values(), now)

    def record_usage(self, usages: dict[str, tuple[int, TaskUsage]]) -> None:
        """Keeps the newest usage sample per task (persisted with the next commit)."""
        for task_id, (attempt, usage) in usages.items():
            task = self.task(task_id)
            if task is not None and task.attempt == attempt and task.state.holds_resources:
                self.tasks[task.job_id][task.index] = replace(task, usage=usage)

    def flush_usage(self, node: str) -> None:
        self.store.write(tasks=self.tasks_on(node))

    # ---- nodes ----

    def upsert_node(self, node: Node) -> None:
        self.store.write(nodes=[node])
        self.nodes[node.name] = node
        self.connected.add(node.name)
        self.down_since.pop(node.name, None)
        self.matrix.upsert(node.name, node.capacity, dict(node.labels), schedulable=True)

    def report_free(self, name: str, free: Resources) -> None:
        self.matrix.report_free(name, free)

    def mark_down(self, name: str, now: float) -> None:
        self.connected.discard(name)
        self.matrix.set_schedulable(name, False)
        node = self.nodes.get(name)
        if node is not None and node.state is NodeState.READY:
            node = replace(node, state=NodeState.DOWN)
            self.store.write(nodes=[node])
            self.nodes[name] = node
        self.down_since.setdefault(name, now)

    def touch(self, name: str, now: float) -> None:
        node = self.nodes.get(name)
        if node is not None:
            self.nodes[name] = replace(node, last_seen=now)

    def lose_tasks(self, name: str, reason: str, now: float, keep: Iterable[str] = ()) -> None:
        kept = set(keep)
        changed = []
        for t in self.tasks_on(name):
            if t.id in kept:
                continue
            if t.state is TaskState.STARTING:  # never confirmed started: run it elsewhere
                changed.append(replace(t, state=TaskState.PENDING, node="", reason=f"requeued: {reason}"))
            else:
                changed.append(replace(t, state=TaskState.LOST, reason=reason, finished_at=now))
        self._commit(changed, now)

    # ---- internals ----

    def _commit(self, tasks: Iterable[Task], now: float, cancel: str = "") -> None:
        """Writes changed tasks and the jobs whose state they change, atomically."""
        task_list = list(tasks)
        for t in task_list:
            self._release(self.tasks[t.job_id][t.index])
            self.tasks[t.job_id][t.index] = t
            self._hold(t)
        job_ids = {t.job_id for t in task_list} | ({cancel} if cancel else set())
        jobs = [self._derive_job(j, now, cancelled=(j == cancel)) for j in sorted(job_ids)]
        if task_list or jobs:
            self.store.write(jobs=jobs, tasks=task_list)
        self.jobs.update({j.id: j for j in jobs})

    def _hold(self, task: Task) -> None:
        if task.state.holds_resources and task.node:
            self.matrix.allocate(task.node, self.jobs[task.job_id].spec.resources)
            self.by_node.setdefault(task.node, set()).add(task.id)

    def _release(self, task: Task) -> None:
        if task.state.holds_resources and task.node:
            self.matrix.release(task.node, self.jobs[task.job_id].spec.resources)
            self.by_node.get(task.node, set()).discard(task.id)

    def _derive_job(self, job_id: str, now: float, cancelled: bool) -> Job:
        job = self.jobs[job_id]
        cancelled = cancelled or job.cancelled
        state = job_state((t.state for t in self.tasks[job_id]), cancelled)
        pending = job.pending_reason if any(t.state is TaskState.PENDING for t in self.tasks[job_id]) else ""
        done = all(t.state.terminal for t in self.tasks[job_id])
        finished_at = (job.finished_at or now) if done else 0.0
        return replace(job, state=state, cancelled=cancelled, pending_reason=pending, finished_at=finished_at)


def _apply_report(task: Task, report: TaskReport, node: str) -> Task | None:
    if report.rejected:
        if task.state is not TaskState.STARTING:
            return None
        return replace(task, state=TaskState.PENDING, node="", reason=f"node {node} refused it: {report.reason}")
    if report.state == task.state and report.state is TaskState.RUNNING:
        return None
    if not can_transition(task.state, report.state):
        log.info("ignoring %s -> %s for %s", task.state.value, report.state.value, task.id)
        return None
    started = task.started_at or (report.at if report.state is TaskState.RUNNING else 0.0)
    updated = replace(task, state=report.state, reason=report.reason, started_at=started)
    if report.state.terminal:
        updated = replace(updated, exit_code=report.exit_code, signal=report.signal,
                          finished_at=report.at, usage=report.usage or task.usage)
    return updated
