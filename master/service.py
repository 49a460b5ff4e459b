"""The master's service: the I/O around the state core. Every change is an event; the
core turns it into a step; the step's rows are written (SQLite, synchronous=FULL), then
the step is applied in memory, then its actions are sent. A failed write changes
nothing and the caller gets UNAVAILABLE. Runs on one asyncio loop, so no locks."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import replace
from typing import AsyncIterator, Callable, Iterable

from tcluster.domain.arrays import parse_index_set
from tcluster.domain.dependency import parse_dependency
from tcluster.domain.fedidentity import reader_of
from tcluster.domain.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from tcluster.domain.gpuusage import GpuBoard
from tcluster.master.features.quotas_live import check_pending_cap
from tcluster.master.identity.gate import Gate
from tcluster.master.core.actions import FetchLog
from tcluster.master.core.feed import AppliedStep
from tcluster.master.core.events import (
    Cancel, CancelTasks, Event, Now, Outbound, Preempt, Step, Submit, SubmitPinned,
)
from tcluster.master.core.pinning import FEDERATION_OWNER, check_user_labels
from tcluster.master.store.committer import Committer
from tcluster.master.execrelay import ExecCap
from tcluster.master.logstream import LOG_WINDOW_CHUNKS, StreamCap, stream_log
from tcluster.master.paging import page_of_jobs
from tcluster.master.ports import Plugins, Preemption
from tcluster.master.agentside import Agents
from tcluster.master.rounds import Rounds
from tcluster.master.queues import dominant_share, load_tree, reload_tree, rows, with_queue_time_limit
from tcluster.master.ledger import UsageLedger
from tcluster.master.settings import MasterSettings
from tcluster.master.loading import load_state, not_found
from tcluster.master.store.base import StateStore
from tcluster.master.core.transitions import handle
from tcluster.domain.model import Job, JobSpec, JobState, Node, Task
from tcluster.scheduler.placement import make_placement
from tcluster.views.queuerow import QueueRow
from tcluster.master import nodeadmin
from tcluster.domain.nodeorders import shown_state
from tcluster.security.authz import (
    ANONYMOUS, CancelJob, Caller, ListJobs, OperateNodes, Policy, ReadCluster, ReadJob, ReadLogs, SubmitJob, run_as,
    sees_only_own, sees_secrets,
)
from tcluster.views.redaction import hidden_fields, redact_job
from tcluster.wire.codec import check_spec

log = logging.getLogger(__name__)


class MasterService:
    """The master's one state and the one way to change it (`_do`), composed of its agents'
    side (master/agentside.py) and its scheduling loop (master/rounds.py); features see
    it as a MasterPort (master/ports.py) and are plugged in by master/app/assemble.py."""

    def __init__(self, settings: MasterSettings, store: StateStore, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic, acting: Callable[[], bool] = lambda: True) -> None:
        self.settings = settings
        self.store = store
        self.clock, self.monotonic = clock, monotonic
        # With etcd, whether this master still leads (its lease deadline, master/store/leadership.py):
        # a master that does not sends nothing to agents, whatever it had decided.
        self.acting = acting
        self.state = load_state(store, settings, monotonic())
        self.queues = load_tree(settings.queues_file)
        self.placement = make_placement(settings.placement)
        self.plugins = Plugins()
        self.rounds = Rounds(settings, self, self._do, acting, self.placement, self.plugins)
        # (clocks through the service: a bench or test may set them after this)
        self.agents = Agents(settings, self._do, self.kick, acting, lambda: self.clock(), lambda: self.monotonic(),
                             self.plugins)
        self.log_streams = StreamCap(settings.log_streams_per_user)
        self.execs = ExecCap(settings.execs_per_task, settings.execs_per_user)     # `tcl exec` (master/execs.py)
        self.committer = Committer(store, self.agents.send, self._recover)
        # Who may do what; the server gives it a user directory when the master is secure.
        self.gate = Gate(Policy(settings.status_visibility))
        self.node_counters = nodeadmin.NodeOpsCounters()
        self.ledger: UsageLedger | None = None       # the usage ledger's reads (master/ledger.py), by assemble

    # ---- the one way to change state ----

    def now(self) -> Now:
        return Now(self.clock(), self.monotonic())

    def _do(self, event: Event) -> tuple[Step, asyncio.Future[None]]:
        """Decide, apply in memory, queue the rows; the step's actions (and the returned
        future) wait until its rows are durable. StoreError: nothing of it was visible."""
        now = self.now()
        step = handle(self.state, event, now)
        new_jobs = [j for j in step.jobs if j not in self.state.jobs]
        before = {task_id: self.state.task(task_id) for task_id in step.tasks}
        reconnected = frozenset(name for name, live in step.live.items() if live.connected != self.state.connected(name))
        self.state.apply(step)
        durable = self.committer.add(step, new_jobs)
        applied = AppliedStep(event, step, now, durable, before, reconnected)
        for listener in self.plugins.listeners:
            listener.on_step(applied)
        return step, durable

    def _recover(self) -> None:
        """A write failed: memory may be ahead of the disk, so the state is rebuilt from
        what is on disk. Streams stay open (agents resend task events that were not
        acknowledged); a node whose registration never reached the disk registers again."""
        if not self.acting():    # etcd: a master that lost its lease restarts as a standby instead
            return
        now = self.now()
        before = dict(self.state.live)
        self.state = load_state(self.store, self.settings, now.mono)
        links = self.agents.links
        for name, link in list(links.items()):
            if name in self.state.nodes:
                self.state.reattach(name, now.mono, now.wall, before.get(name))
            else:
                del links[name]
                link.close()
        if self.plugins.lotes is not None:
            self.plugins.lotes.reloaded()
        self.rounds.restore(now.wall)
        log.error("state reloaded from the store after a failed write")

    # ---- jobs ----

    async def submit(self, spec: JobSpec, caller: Caller = ANONYMOUS) -> tuple[Job, list[Task]]:
        spec = replace(spec, owner=caller.name)
        check_user_labels(spec.labels)
        check_spec(spec)        # the one check of a spec; `tcl submit` runs the same one early
        self.queues.check_leaf(spec.queue)
        spec = with_queue_time_limit(spec, self.queues.max_time_limit_s(spec.queue))
        self.gate.check(caller, SubmitJob(spec.queue, spec.user, spec.weight, self.queues.max_job_weight(spec.queue)))
        spec = replace(spec, user=run_as(caller, spec.user))
        if spec.request_id and (spec.owner, spec.request_id) in self.state.by_request:
            return await self._resubmitted(spec)
        check_pending_cap(self.state, self.queues, spec)   # max_pending_per_user; nothing written yet
        job_id = secrets.token_hex(4)
        while job_id in self.state.jobs or self.store.job_exists(job_id):
            job_id = secrets.token_hex(4)
        _, durable = self._do(Submit(job_id, spec, self._known_states(spec, caller)))
        if self.plugins.lotes is not None:
            self.plugins.lotes.submitted(spec)
        self.kick()
        await durable
        return self.get(job_id)

    async def submit_pinned(self, spec: JobSpec, node: str, job_ids: Iterable[str] = ()) -> str:
        """A federated task's one-task job on `node` (master/core/pinning.py); its id once
        durable. The spec is the LM's (owner `tcluster:federation`, labels under tcluster.io/), with
        the GM's request id: a repeat, also after a restart, returns the first job."""
        spec = replace(spec, owner=FEDERATION_OWNER)
        check_spec(spec)
        if (spec.owner, spec.request_id) in self.state.by_request:
            return (await self._resubmitted(spec))[0].id
        # job_ids: the ids to take first, the first free one (a federated Place's, derived from
        # its request id: master/features/fedrequests.py); then a random one.
        free = (i for i in job_ids if i not in self.state.jobs and not self.store.job_exists(i))
        job_id = next(free, None) or secrets.token_hex(4)
        while job_id in self.state.jobs or self.store.job_exists(job_id):
            job_id = secrets.token_hex(4)
        _, durable = self._do(SubmitPinned(job_id, spec, node))
        self.kick()
        await durable
        return job_id

    async def _resubmitted(self, spec: JobSpec) -> tuple[Job, list[Task]]:
        """A Submit sent again (a client's retry after a lost reply or a failover): the job
        the first one made, once that is durable, never a second job."""
        job_id = self.state.by_request[(spec.owner, spec.request_id)]
        first = self.state.jobs[job_id].spec
        if first != spec:
            raise FailedPrecondition(
                f"request_id {spec.request_id!r} was already used for job {job_id} with a different spec; "
                "use a new request_id for a new job")
        if not await self.written(job_id):
            raise Unavailable("the first submit with this request_id was not written; send it again")
        return self.get(job_id)

    async def written(self, job_id: str) -> bool:
        """Whether the job is in the store once every write queued so far is durable. A
        failed write with no reload after it (etcd: leadership lost) leaves memory ahead of
        the store: only a job the store has counts."""
        await self.committer.add(Step(), [])   # durable once every write queued before it is
        return self.acting() and self.store.job_exists(job_id)

    def broadcast(self, message_for: Callable[[str], Outbound]) -> None:
        """Sends each connected node its own message (LoTES: every node's new bin)."""
        self.agents.broadcast(message_for)

    def kick(self) -> None:
        """A scheduling round soon."""
        self.rounds.kick()

    # ---- read by the dashboard and /metrics (master/web, master/usage) ----

    @property
    def gpus(self) -> GpuBoard:
        """The last NVML samples of running tasks' GPUs, per node."""
        return self.agents.gpus

    @property
    def preemption(self) -> Preemption | None:
        return self.plugins.preemption

    def read(self, job_id: str, caller: Caller) -> tuple[Job, list[Task]]:
        """The job if the caller may read it; NotFound, as for no such job, if not."""
        pair = self.get(job_id)
        self.check_visible(caller, pair[0])
        return pair

    def check_visible(self, caller: Caller, job: Job) -> None:
        """A caller who may not read a job (`--status-visibility own`) gets the very answer a
        missing job gets, so that no answer (Get, Cancel, Logs) tells which ids exist. A
        caller who may read it learns nothing new from a PermissionDenied after this."""
        if not self.gate.decide(caller, ReadJob(job.id, reader_of(job.spec.owner, job.spec.labels))).allowed:
            raise not_found(job.id)

    def shown(self, pair: tuple[Job, list[Task]], caller: Caller) -> tuple[Job, list[Task]]:
        """The job as this caller may see it: owner-only values redacted for others."""
        job = pair[0]
        hidden = hidden_fields(sees_secrets(caller, reader_of(job.spec.owner, job.spec.labels)),
                               self.queues.hides_command(job.spec.queue))
        return redact_job(job, hidden), pair[1]

    def get(self, job_id: str) -> tuple[Job, list[Task]]:
        """Unchecked: for the master's own use (callers go through `read`)."""
        job = self.state.jobs.get(job_id)
        if job is not None:
            return self.state.job_view(job), [self.state.task_view(t) for t in self.state.tasks[job_id]]
        stored = self.store.load_job(job_id) if len(job_id) <= 64 else None   # finished a while ago
        if stored is None:
            raise not_found(job_id)
        return stored

    def list_jobs(self, states: set[JobState], queue: str, limit: int, all_jobs: bool = False,
                  page_token: str = "", owner: str = "",
                  caller: Caller = ANONYMOUS) -> tuple[list[tuple[Job, list[Task]]], str, int]:
        self.gate.check(caller, ListJobs(owner))
        if sees_only_own(caller, self.gate.policy):
            owner = caller.name
        ids, next_token, total = page_of_jobs(self.state.jobs, self.store, states, queue, limit, all_jobs,
                                              page_token, owner)
        return [self.get(job_id) for job_id in ids], next_token, total

    def _known_states(self, spec: JobSpec, caller: Caller) -> tuple[tuple[str, JobState], ...]:
        """How the jobs a dependency names ended, for those no longer in memory (their
        record only, never their task rows, on the loop). Under --status-visibility own a
        job of another user is "not found", as it is to Get: a dependency must not tell
        whether it exists or how it ended."""
        if not spec.dependency:
            return ()
        known, own = [], sees_only_own(caller, self.gate.policy)
        for job_id in parse_dependency(spec.dependency).jobs:
            job = self.state.jobs.get(job_id)
            if job is None and (job := self.store.load_job_record(job_id)) is not None:
                known.append((job_id, job.state))
            if job is not None and own and job.spec.owner != caller.name:
                raise InvalidArgument("dependency", f"job {job_id[:64]!r} not found (a job may wait only on jobs "
                                                    "submitted before it: there can be no cycle)")
        return tuple(known)

    async def cancel(self, job_id: str, caller: Caller = ANONYMOUS, tasks: str = "") -> tuple[Job, list[Task]]:
        """The whole job, or (`tasks`: 5-9,12) only those of its tasks."""
        job = self.read(job_id, caller)[0]
        self.gate.check(caller, CancelJob(job_id, job.spec.owner))
        event = CancelTasks(job_id, parse_index_set(tasks)) if tasks else Cancel(job_id)
        _, durable = self._do(event)
        self.kick()
        await durable
        return self.get(job_id)

    async def preempt(self, victims: tuple[tuple[str, int, str, str], ...]) -> None:
        """A GM's PreemptAndLaunch (master/features/federation_live.py): (task id, attempt, reason,
        preempting job) take this master's preemption path: a kill intent persisted first,
        SIGTERM, --preempt-grace-s, SIGKILL, resent until the agent confirms."""
        _, durable = self._do(Preempt(victims))
        self.kick()
        await durable

    async def act(self, job_id: str, caller: Caller, event_of: Callable[[Job], Event]) -> tuple[Job, list[Task]]:
        """A change to one job by its owner or an admin (as for cancel; master/lifecycle.py's
        verbs): the event `event_of` makes of the job, durable before the answer."""
        job = self.read(job_id, caller)[0]
        self.gate.check(caller, CancelJob(job_id, job.spec.owner))
        _, durable = self._do(event_of(job))
        self.kick()
        await durable
        return self.get(job_id)

    async def logs(self, job_id: str, index: int, stderr: bool, tail_bytes: int,
                   follow: bool = False, caller: Caller = ANONYMOUS,
                   attempt: int = 0) -> AsyncIterator[bytes]:
        job, tasks = self.read(job_id, caller)
        self.gate.check(caller, ReadLogs(job_id, job.spec.owner))
        task = next((t for t in tasks if t.index == index), None)   # an array's rows are by array index
        if task is None:
            if index in job.unplaced:
                raise FailedPrecondition(f"task {job_id}.{index} has not started yet (PENDING)")
            raise NotFound(f"job {job_id} has no task {index} (it has {job.spec.tasks}"
                           f"{': ' + job.spec.array if job.spec.array else ''})")
        if not task.node:
            raise FailedPrecondition(f"task {task.id} has not started yet ({task.state.value})")
        if attempt > task.attempt:
            raise NotFound(f"task {task.id} has no attempt {attempt} (its latest is {task.attempt})")
        node = task.node        # an earlier attempt's logs are on the node that ran it (the ledger's row)
        if 0 < attempt < task.attempt and self.ledger is not None:
            node = await self.ledger.attempt_node(job_id, index, attempt) or node
        link = self.agents.links.get(node)
        if link is None:
            raise Unavailable(f"node {node} is not connected; its logs stay on that node")
        fetch = FetchLog(secrets.token_hex(8), task.id, stderr, tail_bytes, self.settings.log_max_bytes, follow,
                         attempt or task.attempt, LOG_WINDOW_CHUNKS)
        with self.log_streams.hold(caller.name):    # a stalled stream, follow or not, holds its window
            async for data in stream_log(link, fetch):
                yield data

    def nodes(self, caller: Caller = ANONYMOUS) -> list[tuple[Node, list[str]]]:
        """With the newest contact time (kept in memory: heartbeats are not written); under
        `--status-visibility own` a user sees only their own task ids (ids name jobs)."""
        self.gate.check(caller, ReadCluster("nodes"))
        own_only = sees_only_own(caller, self.gate.policy)
        jobs = self.state.jobs
        out = []
        for node in sorted(self.state.nodes.values(), key=lambda n: n.name):
            live = self.state.live.get(node.name)
            seen = max(node.last_seen, live.last_seen_wall) if live else node.last_seen
            tasks = [t.id for t in self.state.tasks_on(node.name)
                     if not own_only or (t.job_id in jobs and jobs[t.job_id].spec.owner == caller.name)]
            shown = shown_state(node.state, node.ops, self.state.connected(node.name))
            out.append((replace(node, last_seen=seen, state=shown), sorted(tasks)))
        return out

    async def operate_nodes(self, request: nodeadmin.NodeRequest,
                            caller: Caller = ANONYMOUS) -> list[tuple[Node, list[str]]]:
        """cordon, uncordon, drain, maint (admins only): one event for all the named nodes,
        durable before the answer; the nodes (and their task ids) as they are then."""
        self.gate.check(caller, OperateNodes(request.op, request.nodes))
        _, durable = self._do(nodeadmin.event_of(request, caller.name))
        self.kick()
        await durable
        names = set(request.nodes)
        return [(n, tasks) for n, tasks in self.nodes(caller) if n.name in names]

    def drain_blockers(self, name: str) -> list[nodeadmin.Blocker]:
        return nodeadmin.blockers(self.state, name, self.clock())

    def free(self, node: Node) -> object:
        return self.state.free(node.name)

    # ---- queues and shares ----

    def use_settings(self, settings: MasterSettings) -> None:
        """SIGHUP's live settings (master/app/reload.py): the service and the parts built from
        its settings read the same copy, so a setting made live reaches every one of them."""
        self.settings = self.agents.settings = self.rounds.settings = settings

    def reload_queues(self) -> str:
        """SIGHUP: re-read the queue file; on any error the old tree stays in force."""
        self.queues, message = reload_tree(self.queues, self.settings.queues_file, self.state.jobs.values())
        self.kick()
        return message

    def list_queues(self, caller: Caller = ANONYMOUS) -> list[QueueRow]:
        self.gate.check(caller, ReadCluster("queues"))
        ledger = self.state.decayed_usage if self.settings.usage_half_life_s else None
        listed = rows(self.queues, self.state.jobs, self.state.counts, self.state.matrix.total_capacity(), ledger)
        if sees_only_own(caller, self.gate.policy):   # a user's row names them, their share and usage
            listed = [r for r in listed if not r.user or r.user == caller.name]
        return listed

    def total_capacity(self) -> object:
        return self.state.matrix.total_capacity()

    def dominant_share(self, job: Job, tasks: list[Task]) -> float:
        """Against the total capacity of READY nodes, as the fairness policies see it."""
        return dominant_share(job, tasks, self.state.matrix.total_capacity())


__all__ = ["MasterService"]
