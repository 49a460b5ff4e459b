"""The master's state in memory: jobs, tasks, nodes, kill intents and liveness, with the
indexes the scheduler needs (per-job task counts, the pending-job set, the node matrix).

It changes only through `apply(step)`, after the step's durable rows are on disk; the
steps themselves are computed by `tcluster.master.core.transitions` without touching it. No
clocks, no I/O."""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, replace

from tcluster.domain.lifecycle import job_state_from_counts
from tcluster.master.core.events import KillIntent, NodeLive, Step
from tcluster.master.core.deadlines import DeadlineIndex
from tcluster.master.core.startindex import StartIndex
from tcluster.domain.dependency import dependency_reason, parse_dependency
from tcluster.master.core.usageblock import UsageIndex
from tcluster.wire.features import DEFAULT_REPORT_BUDGET_PER_S
from tcluster.domain.model import Job, JobState, Node, NodeState, Task, TaskState
from tcluster.domain.resources import Resources
from tcluster.scheduler.decay import DecayLedger
from tcluster.scheduler.usershare import HeldIndex, user_of
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.views import JobView


@dataclass(frozen=True)
class Timeouts:
    node_timeout_s: float = 15.0       # silent this long: DOWN
    lost_timeout_s: float = 30.0       # DOWN this much longer: its tasks LOST
    start_timeout_s: float = 120.0     # STARTING this long without RUNNING: given up
    job_retention_s: float = 7 * 86400.0
    heartbeat_interval_s: float = 1.0
    resident_finished_jobs: int = 1000     # finished jobs kept in memory; older ones are read from disk
    resident_finished_tasks: int = 20_000  # ...and at most this many of their tasks
    purge_interval_s: float = 60.0
    preempt_grace_s: float = 30.0          # a preempted task's SIGTERM..SIGKILL
    # Stream-liveness agents' usage reports, all nodes together, a second (tcluster/wire/features.py)
    report_budget_per_s: float = DEFAULT_REPORT_BUDGET_PER_S

    @property
    def fence_after_s(self) -> float:
        """Agents kill re-runnable tasks once cut off this long: halfway through the lost
        timeout, so the old copy is gone before the master starts another."""
        return self.node_timeout_s + self.lost_timeout_s / 2


class MasterState:
    def __init__(self, jobs: list[Job], tasks: list[Task], nodes: list[Node], kills: list[KillIntent],
                 timeouts: Timeouts, started_mono: float) -> None:
        self.timeouts = timeouts
        self.started_mono = started_mono
        self.jobs: dict[str, Job] = {j.id: j for j in jobs}
        self.tasks: dict[str, list[Task]] = {j.id: [] for j in jobs}
        # Arrays: a task's row by its index (their rows exist only for placed indexes, in
        # the order they were placed); other jobs' rows sit at their index.
        self.slots: dict[str, dict[int, int]] = {j.id: {} for j in jobs if j.spec.array}
        for task in sorted(tasks, key=lambda t: (t.job_id, t.index)):
            self._add_row(task)
        self.counts: dict[str, Counter[TaskState]] = {
            jid: Counter(t.state for t in ts) + virtual_counts(self.jobs[jid]) for jid, ts in self.tasks.items()}
        self.dependents: dict[str, set[str]] = {}    # job -> held jobs that wait on its end
        self.ended: dict[str, JobState] = {}         # waited-on jobs no longer in memory: how they ended
        self.chain_depths: dict[str, int] = {}       # held jobs' chain depths (master/core/chains.py), as computed
        for job in jobs:
            self._index_dependency(job)
        self.deadlines = DeadlineIndex()             # RUNNING tasks with a time limit
        self.gangs: set[str] = {j.id for j in jobs if j.spec.gang and not j.finished_at}   # unfinished gangs
        self.pending_jobs: set[str] = {jid for jid in self.jobs if self._has_pending(jid)}
        self.pending_reasons: dict[str, str] = {}
        # (owner, request_id) -> job id, for every job in memory: a retried Submit finds its job
        self.by_request: dict[tuple[str, str], str] = {
            (j.spec.owner, j.spec.request_id): j.id for j in jobs if j.spec.request_id}
        self.kills: dict[tuple[str, int], KillIntent] = {}
        self._kills_by_node: dict[str, set[tuple[str, int]]] = {}   # a join looks at its node's only
        self._put_kills({(k.task_id, k.attempt): k for k in kills})
        self.usage = UsageIndex()     # task id -> newest sample; TaskUsage built when read
        self.starts = StartIndex()    # STARTING tasks by when their launch began (the tick's deadlines)
        # Finished jobs in memory, oldest end first: beyond the cap they leave memory (they stay
        # on disk until the retention ends), so memory follows what can change, not history.
        self.finished: list[tuple[float, str]] = [(j.finished_at, j.id) for j in jobs if j.finished_at]
        heapq.heapify(self.finished)
        self.finished_tasks = sum(len(self.tasks.get(j.id, ())) for j in jobs if j.finished_at)
        self.purged_at = 0.0
        # Nodes loaded from disk are DOWN until they register; their clock starts now.
        self.nodes: dict[str, Node] = {n.name: replace(n, state=NodeState.DOWN) for n in nodes}
        self.live: dict[str, NodeLive] = {n.name: NodeLive(False, started_mono, n.last_seen) for n in self.nodes.values()}
        self.matrix = NodeMatrix()
        self.user_held = HeldIndex()   # per (leaf, user): the room its tasks hold (the user level)
        self.decayed_usage = DecayLedger()   # --usage-half-life (scheduler/decay.py); loaded by loading.py
        self.by_node: dict[str, set[str]] = {}
        # Nodes an operator touched (cordon, drain, a window): the tick looks at these only.
        self.operated: set[str] = {n.name for n in self.nodes.values() if _operated(n)}
        for node in self.nodes.values():
            self.matrix.upsert(node.name, node.capacity, dict(node.labels), schedulable=False)
        for task in (t for ts in self.tasks.values() for t in ts):
            self._hold(task)
            limit = self.jobs[task.job_id].spec.time_limit_s
            if limit and task.state is TaskState.RUNNING:
                self.deadlines.add(task.id, task.attempt, task.started_at + limit)
            if task.state is TaskState.STARTING:
                self.starts.add(task.id, started_mono)

    # ---- queries ----

    def task(self, task_id: str) -> Task | None:
        job_id, _, index = task_id.rpartition(".")
        tasks = self.tasks.get(job_id)
        if tasks is None or not index.isdigit():
            return None
        row = self._row(job_id, int(index))
        return tasks[row] if row is not None else None

    def _row(self, job_id: str, index: int) -> int | None:
        slots = self.slots.get(job_id)
        if slots is not None:
            return slots.get(index)
        return index if index < len(self.tasks.get(job_id, ())) else None

    def _add_row(self, task: Task) -> None:
        slots = self.slots.get(task.job_id)
        if slots is not None:
            slots[task.index] = len(self.tasks[task.job_id])
        self.tasks[task.job_id].append(task)

    def task_view(self, task: Task) -> Task:
        """The task with its newest usage sample (kept in memory between reports)."""
        usage = self.usage.get(task.id)
        return replace(task, usage=usage) if usage is not None and task.state.holds_resources else task

    def job_view(self, job: Job) -> Job:
        reason = self.pending_reasons.get(job.id, job.pending_reason) if job.id in self.pending_jobs else ""
        if job.id in self.pending_jobs and not reason:
            reason = "waiting to be scheduled"
        if job.held:
            reason = dependency_reason(job.spec.dependency, self.job_state)
        if job.held_by and not job.finished_at:
            reason = f"held by {job.held_by} (tcl release {job.id})"
        counts = self.counts.get(job.id)
        if job.throttle and counts and counts[TaskState.PENDING] and not job.kept_back:
            running = counts[TaskState.STARTING] + counts[TaskState.RUNNING]
            if running >= job.throttle:
                reason = f"array throttle: {running} running, at most {job.throttle} at once (%{job.throttle})"
        return replace(job, pending_reason=reason)

    def job_state(self, job_id: str) -> JobState | None:
        job = self.jobs.get(job_id)
        return job.state if job is not None else self.ended.get(job_id)

    def tasks_on(self, node: str, ordered: bool = True) -> list[Task]:
        """The tasks holding resources on `node`, by id (`ordered=False`: in no particular
        order, for a caller that orders them itself, as the preemption planner does)."""
        ids = self.by_node.get(node, ())
        found = (self.task(task_id) for task_id in (sorted(ids) if ordered else ids))
        return [t for t in found if t is not None]

    def connected(self, node: str) -> bool:
        live = self.live.get(node)
        return live is not None and live.connected

    def kills_on(self, node: str) -> list[tuple[tuple[str, int], KillIntent]]:
        return [(key, self.kills[key]) for key in self._kills_by_node.get(node, ())]

    def _put_kills(self, put: dict[tuple[str, int], KillIntent]) -> None:
        for key, intent in put.items():
            old = self.kills.get(key)
            if old is not None:
                self._kills_by_node.get(old.node, set()).discard(key)
            self.kills[key] = intent
            self._kills_by_node.setdefault(intent.node, set()).add(key)

    def _drop_kill(self, key: tuple[str, int]) -> None:
        intent = self.kills.pop(key, None)
        if intent is not None:
            keys = self._kills_by_node.get(intent.node)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._kills_by_node[intent.node]

    def free(self, node: str) -> Resources:
        return self.matrix.free(node)

    def pending_views(self) -> list[JobView]:
        """What fairness needs of every waiting job, from the per-job counts: O(jobs)."""
        views = []
        for job_id in sorted(self.pending_jobs):
            job, counts = self.jobs[job_id], self.counts[job_id]
            running = counts[TaskState.STARTING] + counts[TaskState.RUNNING]
            pending = counts[TaskState.PENDING]
            if job.throttle:      # an array's %N: no more than N at once
                pending = min(pending, max(job.throttle - running, 0))
            if pending:
                views.append(JobView(job_id, job.spec.queue, job.submitted_at, job.spec.resources,
                                     pending, running, job.spec.weight, user_of(job.spec.owner, job.spec.user)))
        return views

    def _has_pending(self, job_id: str) -> bool:
        job = self.jobs[job_id]
        return not job.cancelled and not job.kept_back and self.counts[job_id][TaskState.PENDING] > 0

    # ---- the one way in ----

    def apply(self, step: Step) -> None:
        # Before the jobs: a release in this same step still clears what it makes stale.
        self.chain_depths.update(step.chain_depths)
        for node in step.nodes.values():
            self._apply_node(node)
        for name, live in step.live.items():
            self._set_live(name, live)
            if name in self.nodes:
                self.matrix.set_schedulable(name, _schedulable(self.nodes[name], live))
        for job in step.jobs.values():
            self._apply_job(job)
        for task in step.tasks.values():
            self._apply_task(task)
        for job_id in step.jobs:
            self._index_job(job_id)
        for key in step.kills_del:
            self._drop_kill(key)
        self._put_kills(step.kills_put)
        for name, free in step.free.items():
            if name in self.nodes:
                self.matrix.report_free(name, free)
        self.ended.update(step.known_states)
        if step.usage is not None:
            self.usage.put(step.usage)   # only samples of tasks holding resources (transitions._beat)
        for job_id in step.jobs_del:
            self._forget_job(job_id)
        if step.ticked is not None:     # launches past the start timeout at this tick: overdue from now on
            self.starts.settle(step.ticked, self.timeouts.start_timeout_s)
        if step.ticked_wall is not None:   # time limits reached at this tick have their kill intents now
            self.deadlines.settle(step.ticked_wall)
        if step.purge_before:
            self.purged_at = step.purge_before + self.timeouts.job_retention_s
        if step.decayed_usage is not None:
            self.decayed_usage = step.decayed_usage
        self._evict_finished(step.purge_before)

    def _evict_finished(self, purge_before: float) -> None:
        t = self.timeouts
        while self.finished:
            finished_at, job_id = self.finished[0]
            job = self.jobs.get(job_id)
            within = len(self.finished) <= t.resident_finished_jobs and self.finished_tasks <= t.resident_finished_tasks
            if job is not None and job.finished_at == finished_at and within and finished_at >= purge_before:
                break
            heapq.heappop(self.finished)
            if job is not None and job.finished_at == finished_at:
                self._forget_job(job_id)

    def reattach(self, name: str, mono: float, wall: float, before: NodeLive | None = None) -> None:
        """After a reload from disk: a node whose stream stayed open is READY again (memory
        only; its registration is on disk already)."""
        node = self.nodes.get(name)
        if node is not None:
            # a stream-liveness node keeps its interval and report limit (memory only)
            kept = (before.report_limit_s, before.usage_interval_s, before.interval_fixed) if before else ()
            self._set_live(name, NodeLive(True, mono, wall, *kept))
            self._apply_node(replace(node, state=NodeState.READY))

    def set_pending_reasons(self, reasons: dict[str, str]) -> None:
        """Memory only: reasons carry live numbers, recomputed every round."""
        self.pending_reasons.update({j: r for j, r in reasons.items() if j in self.pending_jobs})

    # ---- internals ----

    def _set_live(self, name: str, live: NodeLive) -> None:
        """`live` stays ordered by last_seen, oldest first (every new last_seen is the
        step's now), so the tick stops at the first node heard from recently."""
        old = self.live.get(name)
        if old is not None and old.last_seen != live.last_seen:
            del self.live[name]
        self.live[name] = live

    def _apply_node(self, node: Node) -> None:
        self.nodes[node.name] = node
        if _operated(node):
            self.operated.add(node.name)
        else:
            self.operated.discard(node.name)
        self.matrix.upsert(node.name, node.capacity, dict(node.labels),
                           schedulable=_schedulable(node, self.live.get(node.name)), ceilings=node.ceilings)

    def _apply_job(self, job: Job) -> None:
        before = self.jobs.get(job.id)
        self.jobs[job.id] = job
        if job.id not in self.tasks:
            self.tasks[job.id] = []
            self.counts[job.id] = Counter()
            if job.spec.array:
                self.slots[job.id] = {}
            if job.spec.request_id:
                self.by_request[(job.spec.owner, job.spec.request_id)] = job.id
        counts = self.counts[job.id]
        counts.update(virtual_counts(job))
        if before is not None:
            counts.subtract(virtual_counts(before))
        self._index_dependency(job)
        if job.spec.gang and not job.finished_at:
            self.gangs.add(job.id)
        else:
            self.gangs.discard(job.id)
        if job.finished_at and (before is None or not before.finished_at):
            heapq.heappush(self.finished, (job.finished_at, job.id))
            self.finished_tasks += len(self.tasks[job.id])
        elif before is not None and before.finished_at and not job.finished_at:   # `tcl requeue`: running again
            self.finished_tasks -= len(self.tasks[job.id])

    def _apply_task(self, task: Task) -> None:
        tasks = self.tasks[task.job_id]
        counts = self.counts[task.job_id]
        row = self._row(task.job_id, task.index)
        was = None
        if row is not None:
            old = tasks[row]
            was = old.state
            self._release(old)
            counts[old.state] -= 1
            tasks[row] = task
        else:                          # a new job's tasks arrive in index order; an array's as placed
            self._add_row(task)
        counts[task.state] += 1
        self._hold(task)
        limit = self.jobs[task.job_id].spec.time_limit_s
        if limit and task.state is TaskState.RUNNING and was is not TaskState.RUNNING:
            self.deadlines.add(task.id, task.attempt, (task.started_at or 0.0) + limit)
        if task.state is TaskState.STARTING:
            self.starts.add(task.id, self.live_clock(task.node))
        else:
            self.starts.discard(task.id)
        if not task.state.holds_resources:
            self.usage.discard(task.id)
        self._index_job(task.job_id)

    def live_clock(self, node: str) -> float:
        """The newest monotonic time the state has seen: when a launch began."""
        live = self.live.get(node)
        return max(live.last_seen if live else 0.0, self.started_mono)

    def _index_job(self, job_id: str) -> None:
        if job_id in self.jobs and self._has_pending(job_id):
            self.pending_jobs.add(job_id)
        else:
            self.pending_jobs.discard(job_id)
            self.pending_reasons.pop(job_id, None)

    def _forget_job(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is not None and job.finished_at:
            self.finished_tasks -= len(self.tasks.get(job_id, ()))
        if job is not None:
            for parent in self._parents(job):
                self.dependents.get(parent, set()).discard(job_id)
            if self.dependents.get(job_id):
                self.ended[job_id] = job.state         # leaves memory; those waiting on it still learn how it ended
        self.slots.pop(job_id, None)
        self.gangs.discard(job_id)
        for task in self.tasks.pop(job_id, []):
            self._release(task)
            self.usage.discard(task.id)
            self.starts.discard(task.id)
        self.jobs.pop(job_id, None)
        if job is not None and self.by_request.get((job.spec.owner, job.spec.request_id)) == job_id:
            del self.by_request[(job.spec.owner, job.spec.request_id)]
        self.counts.pop(job_id, None)
        self.pending_jobs.discard(job_id)
        self.pending_reasons.pop(job_id, None)

    def _parents(self, job: Job) -> tuple[str, ...]:
        return parse_dependency(job.spec.dependency).jobs if job.spec.dependency else ()

    def _index_dependency(self, job: Job) -> None:
        """A held job is found from each job it waits on; a released (or cancelled) one no longer."""
        for parent in self._parents(job):
            if job.held:
                self.dependents.setdefault(parent, set()).add(job.id)
            else:
                if self.chain_depths.pop(job.id, None) is not None:
                    self.chain_depths.clear()    # depths through it are stale: recomputed when asked
                waiting = self.dependents.get(parent)
                if waiting is not None:
                    waiting.discard(job.id)
                    if not waiting:
                        del self.dependents[parent]
                        self.ended.pop(parent, None)     # nobody waits on how it ended any more

    def _hold(self, task: Task) -> None:
        if task.state.holds_resources and task.node:
            spec = self.jobs[task.job_id].spec
            self.matrix.allocate(task.node, spec.resources)
            self.user_held.add(spec.queue, user_of(spec.owner, spec.user), spec.resources)
            self.by_node.setdefault(task.node, set()).add(task.id)

    def _release(self, task: Task) -> None:
        if task.state.holds_resources and task.node:
            spec = self.jobs[task.job_id].spec
            self.matrix.release(task.node, spec.resources)
            self.user_held.remove(spec.queue, user_of(spec.owner, spec.user), spec.resources)
            self.by_node.get(task.node, set()).discard(task.id)


def _schedulable(node: Node, live: NodeLive | None) -> bool:
    """Placement (and preemption, which places) may use it: connected, READY, and no
    operator state that keeps new tasks away (cordoned, draining, drained, in maintenance)."""
    return live is not None and live.connected and node.state is NodeState.READY and node.ops.schedulable


def _operated(node: Node) -> bool:
    return node.ops.state is not NodeState.READY or node.ops.has_window


def virtual_counts(job: Job) -> Counter[TaskState]:
    """An array's indexes without rows: unplaced ones wait (PENDING), skipped ones were
    cancelled before they started (KILLED)."""
    if not job.unplaced and not job.skipped:
        return Counter()
    return Counter({TaskState.PENDING: len(job.unplaced), TaskState.KILLED: len(job.skipped)})


def derive_job(job: Job, counts: Counter[TaskState], wall: float) -> Job:
    """A job's state from its task counts: O(1), whatever its size."""
    state = job_state_from_counts(counts, job.cancelled)
    done = sum(n for s, n in counts.items() if not s.terminal) == 0
    finished_at = (job.finished_at or wall) if done else 0.0
    if state is JobState.CANCELLED and not done:
        finished_at = 0.0
    return replace(job, state=state, finished_at=finished_at)
