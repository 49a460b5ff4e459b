"""The GM daemon's I/O: one Subscribe stream per LM, Place requests out of the pure
GlobalManager's `decide()` (gm/placing.py), answers/states/deltas back into it, every step
persisted (gm/store.py) before it is acted upon. The decisions stay in tcluster.federation.gm.

Views that may not be placed on (no layout yet, no state for `view_max_age_s`, another
GM count, a refused epoch) are swapped for an empty placeholder view in the pure GM, so
Alg. 1 finds nothing there; the real view keeps taking states and comes back with the
next one."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
import math
import time
from typing import TYPE_CHECKING, Callable

import grpc
from tcluster.daemonkit.listen import bind_port

from tcluster.federation.fairness import FairPreempter
from tcluster.federation.gm import GlobalManager, Pending
from tcluster.federation.messages import PREEMPTED_BY, LMLayout, TaskRequest
from tcluster.federation.view import LMView
from tcluster.gm.cancel import Canceller
from tcluster.gm.fedarray import ArrayThrottle, throttle_of
from tcluster.gm.links import LMLink
from tcluster.gm.retries import retried
from tcluster.gm.placing import Placer
from tcluster.gm.port import Unanswered
from tcluster.gm.settings import GMSettings
from tcluster.gm.speccache import SWEEP_EVERY_S, drop_ended
from tcluster.gm.store import GMStore, TaskRow
from tcluster.gm.wire import Layout, Vocabulary, ended_from, layout_from, state_from
from tcluster.v1 import common_pb2, federation_pb2, federation_pb2_grpc, jobs_pb2, jobs_pb2_grpc
from tcluster.wire.channels import GRPC_OPTIONS, SERVER_GRPC_OPTIONS

if TYPE_CHECKING:
    from tcluster.gm.fedetcd import EtcdMembership

log = logging.getLogger("tcluster.gm")
MIB = 1 << 20
SPEC_CACHE_JOBS = 1024
_ENDED = {common_pb2.TASK_SUCCEEDED: "SUCCEEDED", common_pb2.TASK_FAILED: "FAILED",
          common_pb2.TASK_KILLED: "CANCELLED", common_pb2.TASK_LOST: "LOST"}
# An LM master's one-task job that ended while this GM did not hear it: how its task ended.
_LM_JOB_END = {jobs_pb2.JOB_SUCCEEDED: "SUCCEEDED", jobs_pb2.JOB_FAILED: "FAILED",
               jobs_pb2.JOB_CANCELLED: "CANCELLED"}


def task_req(spec: jobs_pb2.JobSpec) -> tuple[int, int]:
    """(milli-cores, MiB), each rounded up: a task gets at least what it asked (issue 35:
    memory under 1 MiB became 0, and an LM job with memory 0 runs with no memory limit)."""
    return (max(math.ceil(spec.resources.cpu * 1000 - 1e-9), 1), max(-(-spec.resources.memory // MIB), 1))


class GMDaemon:
    """The GM's state and I/O; its helpers see it through gm/port.py (the Placer and the
    Canceller as a GMPort, GlobalManagerService as a ServicePort)."""

    def __init__(self, settings: GMSettings) -> None:
        self.s = settings
        self.n_gms = len(settings.gm_names())
        self.vocab = Vocabulary()
        self.links = [LMLink(n, a) for n, a in settings.lms]
        empty = [LMLayout(i, (), ()) for i in range(len(self.links))]
        # Alg. 2 (--preemption): victims come from the tasks every LM state lists.
        preempter = FairPreempter(settings.queue_shares()) if settings.preemption else None
        # One Place in flight per LM (gm/placing.py): a slow LM holds back only its own.
        self.gm = GlobalManager(settings.index, empty, self.n_gms, [], preempter=preempter,
                                max_in_flight=max(1, len(self.links)))
        self.preempted = 0                   # this GM's tasks stopped by a PreemptAndLaunch
        # job id -> its spec (one task's), the most recently used SPEC_CACHE_JOBS only (issue
        # 35: kept for the GM's whole life, 94 -> 193 MiB); another is read from the store.
        self.specs: OrderedDict[str, jobs_pb2.JobSpec] = OrderedDict()
        self.specs_swept_at = 0.0            # and dropped when their job ends: gm/speccache.py
        self.unanswered: list[Unanswered] = []     # sent, no answer came: sent again, same id
        self.checking: set[str] = set()      # running tasks whose end is being looked up at their LM
        self.wake = asyncio.Event()
        self.tasks: list[asyncio.Task] = []
        self.lookups: set[asyncio.Task] = set()     # ends looked up at an LM (_reconcile)
        self.channels: dict[str, grpc.aio.Channel] = {}
        self._store: GMStore | None = None     # opened by start()
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.canceller = Canceller(self)      # GlobalManagerService.Cancel's intents
        self.placer = Placer(self, self.canceller.drop)
        from tcluster.gm.tls import gm_peer_credentials, lm_credentials
        # address -> TLS credentials (gm/tls.py): LMs with --lm-tls, other GMs when this one serves TLS
        self.creds = {**gm_peer_credentials(settings), **lm_credentials(settings.lms, settings.lm_tls)}
        self.membership: EtcdMembership | None = None     # with --etcd
        self.throttle = ArrayThrottle()       # arrays' tasks held back by their %N (gm/fedarray.py)
        self.forget_tokens: Callable[[], int] = lambda: 0     # the service's token cache, once started

    @property
    def store(self) -> GMStore:
        """The task store; only once started (nothing reads it before)."""
        if self._store is None:
            raise RuntimeError("tcl-gm's store is read before start()")
        return self._store

    # ---- life ----

    async def start(self) -> None:
        self._store = GMStore(self.s.state_dir)
        self._store.on_ended = self._ended_for_good
        self._recover()
        self.canceller.recover()
        from tcluster.gm.service import GMServicer
        self.server = grpc.aio.server(options=list(SERVER_GRPC_OPTIONS))
        servicer = GMServicer(self)
        self.forget_tokens = servicer.auth.forget      # SIGHUP's revocation path (gm/main.py)
        federation_pb2_grpc.add_GlobalManagerServiceServicer_to_server(servicer, self.server)
        self.port = self._bind_server()
        await self.server.start()
        if self.s.etcd:
            from tcluster.gm.fedetcd import start_membership
            self.membership = await start_membership(self.s, self.port)
        self.tasks = [asyncio.create_task(self._subscribe(i)) for i in range(len(self.links))]
        self.tasks.append(asyncio.create_task(self.placer.run()))
        self.tasks.append(asyncio.create_task(self.canceller.run()))

    async def stop(self) -> None:
        if self.membership is not None:
            await self.membership.stop()
        running = [*self.tasks, *self.lookups]
        for t in running:
            t.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await self.placer.stop()
        if self.server is not None:
            await self.server.stop(0)
        for ch in self.channels.values():
            await ch.close()
        if self._store is not None:
            self._store.close()

    def _bind_server(self) -> int:
        assert self.server is not None
        if not self.s.tls_cert:
            return bind_port(self.server.add_insecure_port, self.s.listen, "--listen")
        from tcluster.gm.tls import server_credentials
        creds = server_credentials(self.s.tls_cert, self.s.tls_key, self.s.client_ca)
        server = self.server
        return bind_port(lambda address: server.add_secure_port(address, creds), self.s.listen, "--listen")

    def channel(self, addr: str) -> grpc.aio.Channel:
        # Keepalive pings (GRPC_OPTIONS): an LM's Subscribe stream carries nothing from the GM,
        # so a master whose host died or was cut off without a FIN held it open forever, and the
        # GM never went on to the LM's next address (an HA standby that took over).
        if addr not in self.channels:
            dial = self.creds.get(addr)
            self.channels[addr] = (grpc.aio.secure_channel(addr, dial[0], options=[*GRPC_OPTIONS, *dial[1]])
                                   if dial is not None else grpc.aio.insecure_channel(addr, options=list(GRPC_OPTIONS)))
        return self.channels[addr]

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.s.token}"),) if self.s.token else ()

    # ---- who serves a queue (static flags, or etcd) ----

    def owner_of(self, queue: str) -> str | None:
        """The GM serving `queue`; None: nobody (now). NotServing: this GM's lease is lost."""
        if self.membership is not None:
            return self.membership.owner_of(queue)
        qmap = self.s.queue_map
        return qmap.get(queue, self.s.name if not qmap else None)

    def peer_address(self, name: str) -> str | None:
        live = self.membership.address_of(name) if self.membership is not None else None
        if live and self.s.tls_cert and live not in self.creds:    # known only from etcd: dialled as --gms peers
            from tcluster.gm.tls import peer_credentials
            self.creds[live] = (peer_credentials(self.s.tls_cert, self.s.tls_key, self.s.client_ca), [])
        return live or dict(self.s.gms).get(name)

    # ---- queues and recovery ----

    def spec_of(self, job_id: str) -> jobs_pb2.JobSpec:
        spec = self.specs.get(job_id)
        if spec is not None:
            self.specs.move_to_end(job_id)
            return spec
        row = self.store.job(job_id)
        if row is None:
            raise KeyError(f"federated job {job_id} is not in the GM's store")
        spec = jobs_pb2.JobSpec.FromString(row.spec)
        # tasks stays the job's count: the LM runs each task as a one-task job and gives it
        # the federated job's TCL_TASK_COUNT (tcluster/domain/fedidentity.py).
        # An array's task count is its indexes' (gm/fedarray.py); `array` stays set only to tell
        # the LM that each task's index is an array index (TCL_ARRAY_TASK_ID); it never runs one.
        if spec.array:
            spec.tasks, spec.array = row.tasks, "1"
        spec.request_id = ""
        self.specs[job_id] = spec
        while len(self.specs) > SPEC_CACHE_JOBS:
            self.specs.popitem(last=False)
        return spec

    def task_spec(self, row: TaskRow) -> TaskRequest:
        spec = self.spec_of(row.job_id)
        return TaskRequest(row.task_id, row.queue, task_req(spec), self.vocab.mask(list(spec.constraints)))

    def enqueue(self, row: TaskRow) -> None:
        self.gm.add_queue(row.queue)
        self.gm.queues[row.queue].items.append(Pending(self.task_spec(row), row.attempt))
        self.wake.set()

    def admit(self, job_id: str, pending: list[TaskRow], active: tuple[str, ...] = ()) -> None:
        """A job's pending tasks into their queue, as many as its array's throttle lets in
        (gm/fedarray.py); `active`: its tasks placing or running already."""
        job = self.store.job(job_id)       # as submitted: spec_of's copy has no throttle left
        limit = throttle_of(jobs_pb2.JobSpec.FromString(job.spec)) if job is not None else 0
        for row in self.throttle.admit(job_id, limit, list(active), pending):
            self.enqueue(row)

    def _ended_for_good(self, task_id: str) -> None:
        """The store's end hook: a throttled array lets its next held task in."""
        let_in = self.throttle.ended(task_id, lambda t: bool(self.store.tasks("task_id=? AND state='PENDING'", (t,))))
        if let_in is not None:
            self.enqueue(self.store.tasks("task_id=?", (let_in,))[0])

    def _recover(self) -> None:
        """Pending tasks back to the GM (up to each array's throttle); an unanswered request
        is resent unchanged."""
        pending: dict[str, list[TaskRow]] = {}
        active: dict[str, list[str]] = {}
        for row in self.store.tasks("state IN ('PENDING','PLACING','RUNNING')"):
            if row.state == "PENDING" or (row.state == "PLACING" and row.request is None):
                pending.setdefault(row.job_id, []).append(row)
                continue
            active.setdefault(row.job_id, []).append(row.task_id)
            if row.state == "PLACING":
                self.gm.add_queue(row.queue)
                req = federation_pb2.PlaceRequest.FromString(row.request)
                self.unanswered.append((row.lm, req, Pending(self.task_spec(row), row.attempt), row.queue))
            else:
                self.gm.running[row.task_id] = (row.lm, row.node, Pending(self.task_spec(row), row.attempt))
        for job_id, rows in pending.items():
            self.admit(job_id, sorted(rows, key=lambda r: r.idx), tuple(active.get(job_id, ())))

    # ---- LM streams ----

    async def _subscribe(self, lm: int) -> None:
        link, backoff = self.links[lm], 0.1
        while True:
            tour = link.tour(leader_first=False)    # --lms order: the stream finds the leader itself
            for addr in tour:
                try:
                    stub = federation_pb2_grpc.LocalManagerServiceStub(self.channel(addr))
                    call = stub.Subscribe(federation_pb2.SubscribeRequest(gm=self.s.index, gm_name=self.s.name),
                                          metadata=self.metadata())
                    async for update in call:
                        link.connected, link.addr, backoff = True, addr, 0.1
                        self.on_update(lm, update)
                except grpc.aio.AioRpcError as e:
                    log.info("LM %s at %s: %s %s", link.name, addr, e.code().name, (e.details() or "")[:300])
                    link.follow(tour, e)
                link.connected = False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def on_update(self, lm: int, update: federation_pb2.LMUpdate) -> None:
        kind = update.WhichOneof("kind")
        link = self.links[lm]
        if kind == "layout":
            self._new_layout(lm, layout_from(update.layout, self.vocab))
        elif kind == "state" and link.view is not None and update.state.epoch == link.layout.epoch:
            # A newer state may show room freed by another GM's tasks (whose ends only that
            # GM hears): tasks parked for no room must be tried again on it.
            if link.view.apply(state_from(update.state)) and link.usable:
                self.gm.stamp += 1
            link.last_state = time.monotonic()
            self.set_usable(lm, True)
            self._reconcile(lm, {t.task_id for t in update.state.tasks})
        elif kind == "ended":
            self._ended(lm, update.ended)
        self.wake.set()

    def _new_layout(self, lm: int, layout: Layout) -> None:
        link = self.links[lm]
        if layout.pure.lm != lm or layout.gms != self.n_gms:
            log.error("LM %s: layout of LM %d with %d GMs; this GM expects LM %d of %d GMs: not used",
                      link.name, layout.pure.lm, layout.gms, lm, self.n_gms)
            link.layout, link.view = None, None
            self.set_usable(lm, False)
            return
        link.layout, link.view = layout, LMView(layout.pure, self.n_gms, len(self.vocab.bits))
        link.view.epoch, link.view.version = layout.epoch, -1
        self.set_usable(lm, False)      # until its first state of this epoch

    def set_usable(self, lm: int, usable: bool) -> None:
        link = self.links[lm]
        view = link.view if usable and link.view is not None else LMView(LMLayout(lm, (), ()), self.n_gms, 0)
        if self.gm.views[lm] is not view:
            self.gm.views[lm] = view
            self.gm.stamp += 1
        link.usable = usable and link.view is not None

    def _ended(self, lm: int, msg: federation_pb2.FedTaskEnded) -> None:
        link, delta = self.links[lm], ended_from(msg)
        current = link.layout is not None and delta.epoch == link.layout.epoch
        if not self._of_current_run(lm, msg):
            # An earlier copy's end (a preempted one whose end was found first by lookup):
            # its room only, never a second requeue.
            if current and link.view.apply_delta(delta) and link.usable:
                self.gm.stamp += 1
            return
        if current and link.usable:
            self.gm.on_delta(delta)          # frees the room; a preempted task goes back to its queue
        else:
            if current:
                link.view.apply_delta(delta)
            run = self.gm.running.pop(delta.task_id, None)
            if delta.preempted and run is not None:
                p = run[2]
                p.attempt, p.failed_at = p.attempt + 1, -1
                self.gm.queues[p.task.queue].items.appendleft(p)
        if delta.preempted:
            self._preempted(delta.task_id, msg.reason)
            return
        state = _ENDED.get(msg.state, "SUCCEEDED")
        if not retried(self, delta.task_id, state, msg.reason, self.canceller.jobs.__contains__):   # --retries
            self.store.ended(delta.task_id, state, msg.exit_code, msg.reason, msg.job_id)

    def _of_current_run(self, lm: int, msg: federation_pb2.FedTaskEnded) -> bool:
        rows = self.store.tasks("task_id=?", (msg.task_id,))
        if not rows:
            return False
        row = rows[0]
        if row.state == "RUNNING":
            return row.lm == lm and not (msg.job_id and row.lm_job and row.lm_job != msg.job_id)
        # PLACING: an answer lost while the task ran and ended; PENDING or ended: an old copy.
        return row.state == "PLACING" and not msg.preempted

    def _preempted(self, task_id: str, reason: str) -> None:
        """Waiting again (not FAILED; the GM counts no retries), placed again later; the
        pure GM has already put it back at its queue's head."""
        rows = self.store.tasks("task_id=?", (task_id,))
        if rows and rows[0].state == "RUNNING":
            self.store.preempted(task_id, rows[0].attempt + 1, reason or PREEMPTED_BY.strip())
            self.preempted += 1
            log.info("task %s %s (%d of this GM's tasks preempted so far)", task_id, reason, self.preempted)

    def _reconcile(self, lm: int, listed: set[str]) -> None:
        """Task ends this GM did not hear (it was down, or its stream was, when the LM sent
        them): a task it holds RUNNING on this LM that the LM's full state no longer lists is
        looked up in the LM master's own job, and recorded as that job ended, once."""
        missing = [t for t, (at, _node, _p) in self.gm.running.items()
                   if at == lm and t not in listed and t not in self.checking]
        if missing:
            self.checking.update(missing)
            lookup = asyncio.create_task(self._check_ended(lm, missing))
            self.lookups.add(lookup)               # held until done, then dropped: no growth
            lookup.add_done_callback(self.lookups.discard)

    async def _check_ended(self, lm: int, task_ids: list[str]) -> None:
        stub = jobs_pb2_grpc.JobServiceStub(self.channel(self.links[lm].addr))
        try:
            for task_id in task_ids:
                rows = self.store.tasks("task_id=? AND state='RUNNING'", (task_id,))
                if not rows or not rows[0].lm_job:
                    continue
                try:
                    job = await stub.Get(jobs_pb2.GetJobRequest(id=rows[0].lm_job), metadata=self.metadata(),
                                         timeout=10)
                except grpc.aio.AioRpcError as e:
                    log.info("LM %s: job %s of task %s: %s", self.links[lm].name, rows[0].lm_job, task_id,
                             e.code().name)
                    continue
                end = _LM_JOB_END.get(job.state)
                if not self.store.tasks("task_id=? AND state='RUNNING' AND lm_job=?", (task_id, job.id)):
                    continue          # meanwhile its end came (and it may run again, elsewhere)
                if end == "CANCELLED" and job.tasks and job.tasks[0].reason.startswith(PREEMPTED_BY):
                    self._requeue(task_id, job.tasks[0].reason.split(";")[0])
                    continue
                if end is not None and job.tasks and self.gm.running.pop(task_id, None) is not None:
                    log.info("task %s ended %s while this GM did not hear it (LM %s job %s)", task_id, end,
                             self.links[lm].name, job.id)
                    if not retried(self, task_id, end, job.tasks[0].reason, self.canceller.jobs.__contains__):
                        self.store.ended(task_id, end, job.tasks[0].exit_code, job.tasks[0].reason)
        finally:
            self.checking.difference_update(task_ids)

    def _requeue(self, task_id: str, reason: str) -> None:
        """A preemption found by lookup (the delta was missed): as on_delta would."""
        run = self.gm.running.pop(task_id, None)
        if run is None:
            return
        p = run[2]
        p.attempt, p.failed_at = p.attempt + 1, -1
        self.gm.queues[p.task.queue].items.appendleft(p)
        self._preempted(task_id, reason)
        self.wake.set()

    def age_views(self, now: float) -> None:
        if now - self.specs_swept_at >= SWEEP_EVERY_S and self._store is not None:
            self.specs_swept_at = now
            drop_ended(self.specs, self._store.db)       # gm/speccache.py
        for lm, link in enumerate(self.links):
            if link.usable and now - link.last_state > self.s.view_max_age_s:
                log.warning("LM %s: no state for %.0f s: not placing there", link.name, now - link.last_state)
                self.set_usable(lm, False)
