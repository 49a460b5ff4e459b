"""The LM service's I/O over a live master (issue 25): a GM's Place becomes a pinned
one-task job of this master (master/core/pinning.py), answered once durable; each GM's
Subscribe stream gets the layout, the full state every --federation-state-interval-s and
its tasks' ends at once. The decisions are FederationLM's (master/features/federation_lm.py) and
the master core's; this module only orders them: check, write, then answer and tell.

Idempotency: the job carries the PlaceRequest's request_id (owner `tcluster:federation`), so a
repeat finds the first job in the master's own request index, also after a restart or a
failover (the job is in the store), before any other check: the same answer, never a
second job."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Union

from tcluster.domain.errors import InvalidArgument, NotFound, ResourceExhausted, Unavailable
from tcluster.federation.messages import (
    PREEMPTED_BY, Answer, TaskLaunched, LMState, PreemptAndLaunch, Request, TaskEnded, preempted_reason,
)
from tcluster.master.core.events import Step
from tcluster.master.core.feed import AppliedStep
from tcluster.master.core.pinning import FED_TASK, FEDERATION_OWNER, check_user_labels, label, pinnable, pinned_node
from tcluster.master.features.federation_lm import (
    FederationLM, FedRun, LiveLayout, NO_ROOM, Res, epoch_floor, fed_labels, federated_run, res_of, resources_of,
)
from tcluster.master.features.federation_page import PlaceCounters
from tcluster.master.features.fedrequests import candidate_ids, placed_job
from tcluster.master.ports import MasterPort
from tcluster.master.settings import MasterSettings
from tcluster.domain.fedidentity import FED_USER, identity_labels
from tcluster.domain.model import Job, JobSpec, TaskState
from tcluster.daemonkit.timeouts import wait_for

log = logging.getLogger(__name__)
# A GM that reads this far behind is cut off: it reconnects and starts from a full state.
SUBSCRIBER_BACKLOG = 10_000
# Request ids of jobs this master made, kept past the job's stay in memory (a finished job
# leaves memory, and the master's request index with it, after --resident-finished-jobs
# newer ones): a GM's late repeat still finds its job. ~100 bytes each.
PLACED_MEMORY = 100_000
# Open Subscribe streams, all GMs together (a few per GM is normal: reconnects overlap).
MAX_SUBSCRIPTIONS = 256


@dataclass(frozen=True)
class Ended:
    """A task end for its GM's stream: the pure delta plus how the task ended."""
    delta: TaskEnded
    state: TaskState
    exit_code: int
    reason: str
    job_id: str = ""       # the master's job that ran it: a GM tells an earlier copy's end from its run's


Update = Union[LiveLayout, LMState, Ended]


@dataclass
class Subscription:
    gm: int
    name: str
    queue: asyncio.Queue[Update | None] = field(default_factory=lambda: asyncio.Queue(SUBSCRIBER_BACKLOG))
    closed: bool = False
    last_full: float = 0.0        # monotonic: when this GM last got a full state

    def put(self, update: Update | None) -> None:
        if self.closed:
            return
        try:
            self.queue.put_nowait(update)
        except asyncio.QueueFull:
            log.warning("GM %s (%d) reads too slowly: its stream is closed", self.name, self.gm)
            self.closed = True
            self.queue = asyncio.Queue(1)
            self.queue.put_nowait(None)


class LiveLM:
    def __init__(self, master: MasterPort, s: MasterSettings) -> None:
        assert s.federation_lm_id is not None
        self.master = master
        self.interval_s = s.federation_state_interval_s
        self.fed = FederationLM(s.federation_lm_id, s.lm_name, s.federation_gms, self._room, 0,
                                schedulable=lambda node: pinnable(self.master.state, node))
        self.subscriptions: list[Subscription] = []
        self.fed_jobs: dict[str, str] = {}        # federated task id -> the master's job id
        self.placed: OrderedDict[str, str] = OrderedDict()    # request id -> job id, the latest PLACED_MEMORY
        # Victims of a PreemptAndLaunch still stopping: fed task id -> (its GM, the check's
        # delta, why). Their GM hears of them once they really ended (on_step).
        self.stopping: dict[str, tuple[int, TaskEnded, str]] = {}
        self._room_cache: dict[str, Res] = {}
        self.counters = PlaceCounters()           # the dashboard's federation page (federation_page.py)
        self._state_seen: object = master.state
        # A LiveLM is built when this master starts leading: on etcd a new term (epoch_floor).
        takeover = s.lease_ttl_s if s.store_url.kind == "etcd" else None
        self.fed.sync(self.master.state.nodes, self._runs, epoch_floor(master.clock(), takeover), force=True)
        log.info("federation: local manager %s (index %d) of %d GMs, epoch %d, %d nodes", s.lm_name,
                 s.federation_lm_id, s.federation_gms, self.fed.live.epoch, len(self.fed.live.names))

    # ---- the master's state as the LM sees it ----

    def _room(self, node: str) -> Res:
        """Cached per node until a step touches it: a state lists every node's room, and
        one is built for every answer."""
        state = self.master.state
        room = self._room_cache.get(node)
        if room is None:
            room = res_of(state.free(node)) if state.matrix.is_schedulable(node) else NO_ROOM
            self._room_cache[node] = room
        return room

    def _touched(self, step: Step) -> bool:
        """Forgets the room of the nodes this step may have changed; whether it did any."""
        nodes = {t.node for t in step.tasks.values() if t.node}
        nodes.update(step.nodes, step.free, step.live)
        for name in nodes:
            self._room_cache.pop(name, None)
        return bool(nodes)

    def _epoch_floor(self) -> int:
        return epoch_floor(self.master.clock())

    def _runs(self) -> Iterator[FedRun]:
        state = self.master.state
        self.fed_jobs = {}
        for job in state.jobs.values():
            run = federated_run(job, state.tasks.get(job.id, []))
            if run is not None:
                self.fed_jobs[run.task.task_id] = job.id
                yield run

    def sync(self) -> None:
        """A new epoch when the node set changed, or when the master reloaded its state
        after a failed write (what runs is rebuilt from it): every GM gets the new layout
        and state."""
        reloaded = self.master.state is not self._state_seen
        if reloaded:
            self._state_seen = self.master.state
            self._room_cache.clear()
        if self.fed.sync(self.master.state.nodes, self._runs, self._epoch_floor(), force=reloaded):
            log.info("federation: epoch %d, %d nodes", self.fed.live.epoch, len(self.fed.live.names))
            for sub in self.subscriptions:
                sub.put(self.fed.live)
                sub.put(self.state())

    def state(self) -> LMState:
        return self.fed.check.state()

    # ---- Subscribe ----

    def subscribe(self, gm: int, name: str) -> Subscription:
        self._check_gm(gm)
        if len(self.subscriptions) >= MAX_SUBSCRIPTIONS:
            raise ResourceExhausted(f"{MAX_SUBSCRIPTIONS} Subscribe streams are open on this LM; close some first")
        self.sync()
        sub = Subscription(gm, name, last_full=self.master.monotonic())    # a full state is queued
        sub.put(self.fed.live)
        sub.put(self.state())
        self.subscriptions.append(sub)
        log.info("federation: GM %s (%d) subscribed", name or "?", gm)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        if sub in self.subscriptions:
            self.subscriptions.remove(sub)

    async def next_update(self, sub: Subscription) -> Update | None:
        """The next update for this GM; the full state once an interval passed without one
        (a steady flow of task ends does not hold it back)."""
        now = self.master.monotonic()
        due = sub.last_full + self.interval_s - now
        update: Update | None = None
        if due > 0:
            try:
                update = await wait_for(sub.queue.get(), due)
            except asyncio.TimeoutError:
                update = None
            else:
                if not isinstance(update, LMState):
                    return update
        if update is None and not sub.closed:
            self.sync()
            self.fed.check.touch()       # the real room moves with local work: a fresh version
            update = self.state()
        if isinstance(update, LMState):
            sub.last_full = self.master.monotonic()
        return update

    def _check_gm(self, gm: int) -> None:
        if not 0 <= gm < self.fed.gms:
            raise InvalidArgument("gm", f"{gm} is not a GM index of this federation; allowed 0..{self.fed.gms - 1} "
                                        "(--federation-gms)")

    # ---- task ends ----

    def on_step(self, applied: AppliedStep) -> None:
        """After a step is applied: task ends of federated jobs go to their GMs once durable."""
        step = applied.step
        if self.master.state is not self._state_seen or (
                step.nodes and any(name not in self.fed.live.names for name in step.nodes)):
            self.sync()
        if self._touched(step):
            self.fed.check.touch()
        ends: list[tuple[int, Ended]] = []
        for task in step.tasks.values():
            # A job that ended in this step may have left memory already (--resident-finished-jobs):
            # the step still carries its row.
            job = self.master.state.jobs.get(task.job_id) or step.jobs.get(task.job_id)
            node = pinned_node(job.spec) if job is not None else ""
            fed_id = label(job.spec, FED_TASK) if node else ""
            if not fed_id:
                continue
            if task.state.terminal:
                self.fed_jobs.pop(fed_id, None)
            else:
                self.fed_jobs[fed_id] = task.job_id
            waits = task.state is TaskState.PENDING
            self.fed.set_waiting(node, fed_id, res_of(job.spec.resources) if waits else None)
            if task.state.terminal and fed_id in self.fed.check.running:
                gm, delta = self.fed.check.end(fed_id)
                # A victim whose stop this master did not remember (it restarted meanwhile):
                # its reason still says it was preempted.
                stopping = self.stopping.pop(fed_id, None) is not None
                gone = task.state is TaskState.KILLED and (stopping or task.reason.startswith(PREEMPTED_BY))
                ends.append((gm, Ended(replace(delta, preempted=gone), task.state, task.exit_code or 0,
                                       task.reason, task.job_id)))
            elif task.state.terminal and fed_id in self.stopping:
                gm, delta, why = self.stopping.pop(fed_id)
                # It may have ended on its own before the signal: then that is how it ended.
                killed = task.state is TaskState.KILLED
                ends.append((gm, Ended(replace(delta, preempted=killed), task.state, task.exit_code or 0,
                                       why if killed else task.reason, task.job_id)))
        if ends and applied.durable is None:
            self._tell(ends)
        elif ends and applied.durable is not None:
            applied.durable.add_done_callback(lambda f: None if f.cancelled() or f.exception() else self._tell(ends))

    def _tell(self, ends: list[tuple[int, Ended]]) -> None:
        for gm, ended in ends:
            for sub in self.subscriptions:
                if sub.gm == gm:
                    sub.put(ended)

    # ---- Place ----

    async def place(self, req: Request, spec: JobSpec, admit: Callable[[JobSpec], JobSpec] = lambda spec: spec,
                    user: str = "") -> tuple[Answer, str]:
        """The answer and the master's job that runs the task ("" when none). `admit` is the
        submitting user's check, as for a local submit (master/edge/federation_users.py): it
        sees the spec in the LM queue that will run it, and raises before anything is held.
        `user`: that user's name on a secure LM (the job reads as theirs: fedidentity.reader_of)."""
        self._check_gm(req.gm)
        if self.master.state is not self._state_seen:
            self.sync()
        first = await self._repeat(req)
        if first is not None:
            return first
        # A federated array's task (the GM sets `array`): one task whose index is an array
        # index; checked and run as a plain one-task job (gm/fedarray.py).
        array, spec = bool(spec.array), replace(spec, array="")
        spec = admit(replace(spec, queue=self._lm_queue(req.task.queue)))
        check = self.fed.check
        if req.request_id in check.answers:      # an earlier answer without a job: not a launch
            return check.answers[req.request_id], ""
        answer, notices = check.handle(req)
        if not isinstance(answer, TaskLaunched):
            return answer, ""
        node = self.fed.live.names[req.node]
        try:
            job_id = await self.master.submit_pinned(self._spec(req, spec, node, array, user), node,
                                                     candidate_ids(req.request_id))
        except BaseException:
            # Not written: nothing was launched; the GM's retry is checked afresh.
            check.answers.pop(req.request_id, None)
            if req.task.task_id in check.running:
                check.end(req.task.task_id)
            raise
        self.fed_jobs[req.task.task_id] = job_id
        self.placed[req.request_id] = job_id
        if len(self.placed) > PLACED_MEMORY:
            self.placed.popitem(last=False)
        if isinstance(req, PreemptAndLaunch):
            await self._stop_victims(req, job_id, notices)
        check.touch()
        answer = replace(answer, state=check.state())
        check.answers[req.request_id] = answer
        return answer, job_id

    async def _repeat(self, req: Request) -> tuple[Answer, str] | None:
        """A request id this master already made a job for: its first answer, once that
        job is durable (a repeat racing the first write waits for it)."""
        job_id = self.master.state.by_request.get((FEDERATION_OWNER, req.request_id)) or \
            self.placed.get(req.request_id) or placed_job(req.request_id, FEDERATION_OWNER, self._load_job)
        if job_id is None:
            return None
        if not await self.master.written(job_id):
            raise Unavailable("the first request with this request_id was not written; send it again")
        job, _ = self.master.get(job_id)
        node = pinned_node(job.spec)
        first = self.fed.check.answers.get(req.request_id)
        if isinstance(first, TaskLaunched):
            return first, job_id
        index = self.fed.live.index(node)
        logical = index >= 0 and self.fed.live.layout.owner[index] != req.gm
        return TaskLaunched(req.request_id, req.task.task_id, self.fed.lm, max(index, 0), self.state(), logical), job_id

    def _lm_queue(self, fed_queue: str) -> str:
        """The LM leaf that runs a federated queue's task: the same name, else default."""
        queues = self.master.queues
        return fed_queue if queues.is_leaf(fed_queue) else (
            "default" if queues.is_leaf("default") else queues.leaves[0])

    def _load_job(self, job_id: str) -> Job | None:
        """A job from memory, else from the store (finished and gone from memory); None: none."""
        try:
            return self.master.get(job_id)[0]
        except NotFound:
            return None

    def _spec(self, req: Request, spec: JobSpec, node: str, array: bool = False, user: str = "") -> JobSpec:
        """What runs: the GM's spec as a one-task job of exactly the checked request."""
        queue = self._lm_queue(req.task.queue)
        check_user_labels(spec.labels)
        # The federated task's identity for its environment (tcluster/domain/fedidentity.py):
        # the GM sends the job's task count in spec.tasks; the attempt is the request id's.
        identity = identity_labels(req.task.task_id, req.request_id, spec.tasks, self.gm_name(req.gm), array)
        identity += ((FED_USER, user),) if user else ()
        return replace(spec, tasks=1, array="", gang=False, dependency="", retries=0, on_preempt="cancel",
                       resources=resources_of(req.task.req), queue=queue, request_id=req.request_id,
                       labels=(*spec.labels, *fed_labels(req.gm, req.task.task_id, req.task.queue, node), *identity))

    def gm_name(self, gm: int) -> str:
        """The name the GM of this index subscribed with; gm<index> when none is subscribed."""
        return next((sub.name for sub in reversed(self.subscriptions) if sub.gm == gm and sub.name), f"gm{gm}")

    async def _stop_victims(self, req: PreemptAndLaunch, by_job: str,
                            notices: tuple[tuple[int, TaskEnded], ...]) -> None:
        """Through the master's preemption path (a kill intent persisted first, SIGTERM,
        --preempt-grace-s, SIGKILL); a victim still waiting for its node is cancelled. Each
        victim's GM is told once the victim really ended (on_step), so that GM never places
        the task again while the old copy is still stopping; a victim already gone, now."""
        why = preempted_reason(req.task.task_id, req.task.queue)
        kills: list[tuple[str, int, str, str]] = []
        waiting: list[str] = []
        now: list[tuple[int, Ended]] = []
        for gm, delta in notices:
            job_id = self.fed_jobs.get(delta.task_id, "")
            tasks = self.master.state.tasks.get(job_id, [])
            if not tasks or tasks[0].state.terminal:
                now.append((gm, Ended(delta, TaskState.KILLED, 0, why, job_id)))
                continue
            self.stopping[delta.task_id] = (gm, delta, why)
            if tasks[0].state.holds_resources:
                kills.append((tasks[0].id, tasks[0].attempt, why, by_job))
            else:
                waiting.append(job_id)
        log.info("federation: %s preempts %s", req.task.task_id, ", ".join(d.task_id for _, d in notices))
        if kills:
            await self.master.preempt(tuple(kills))
        for job_id in waiting:
            await self.master.cancel(job_id)
        self._tell(now)

