"""GlobalManagerService: Submit (forwarded once to the queue's owner), Get and Cancel (forwarded
to the job's owner), List (paged, newest first), Status."""

from __future__ import annotations

import re
import time

import grpc

from tcluster.domain.errors import TclusterError, Unavailable
from tcluster.gm.auth import AuthError, GMAuth, Identity, may_submit, may_touch
from tcluster.gm.certusers import NOT_FORWARDED, owner_secret
from tcluster.gm.owners import Owners
from tcluster.gm.port import ServicePort
from tcluster.gm.store import TERMINAL, JobRow
from tcluster.v1 import federation_pb2, federation_pb2_grpc, jobs_pb2
from tcluster.gm.fedarray import array_indexes
from tcluster.gm.fedspec import unsupported_field
from tcluster.wire.codec import check_spec as check_master_spec
from tcluster.wire.protobuf import spec_from_pb

_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.\-/]+=[A-Za-z0-9_.\-/:]*$")
MAX_TASKS = 10_000
MAX_CONSTRAINTS = 64          # as at the master (README, "Bad input changes nothing")


def check_spec(spec: jobs_pb2.JobSpec) -> str | None:
    """What is wrong with a federated spec, naming the field; None when fine. First the
    federation's own rules, then the one check every master runs at Submit (the same
    message an LM would give, issue 35: a spec an LM refuses was accepted here and resent
    for ever)."""
    if not spec.command:
        return "spec.command: is empty; give the program to run"
    if not 1 <= spec.tasks <= MAX_TASKS:
        return f"spec.tasks: {spec.tasks} is not in 1..{MAX_TASKS}"
    if spec.resources.cpu <= 0 or spec.resources.memory <= 0:
        return "spec.resources: cpu and memory must both be > 0 (a federated task needs a size to place)"
    unsupported = unsupported_field(spec)
    if unsupported:
        return unsupported
    if len(spec.constraints) > MAX_CONSTRAINTS:
        return f"spec.constraints: {len(spec.constraints)} given; at most {MAX_CONSTRAINTS}"
    for c in spec.constraints:
        if not _CONSTRAINT.match(c):
            return f"spec.constraints: {c[:40]!r} is not key=value (the only form a federation places by)"
    if spec.array:
        array = array_indexes(spec, MAX_TASKS)
        if isinstance(array, str):
            return array
    try:
        check_master_spec(spec_from_pb(spec))
    except TclusterError as error:
        return str(error)     # word for word what the LM master says at Submit
    except ValueError as error:
        return f"spec: {error}"
    return None


def job_state(states: list[str]) -> str:
    if any(s not in TERMINAL for s in states):
        return "RUNNING" if any(s in ("RUNNING", "PLACING") for s in states) else "PENDING"
    for s in ("FAILED", "LOST", "CANCELLED"):
        if s in states:
            return "FAILED" if s == "LOST" else s
    return "SUCCEEDED"

LIST_DEFAULT = 100     # jobs in one List page when the request names no limit
LIST_MAX = 1000        # at most, in one answer: it must stay under gRPC's message limit


class GMServicer(federation_pb2_grpc.GlobalManagerServiceServicer):
    def __init__(self, port: ServicePort) -> None:
        self.port = port
        self.auth = GMAuth(port)              # issue 35: gm/auth.py
        self.owners = Owners(port.store.db)

    async def _identify(self, context: grpc.aio.ServicerContext) -> Identity:
        try:
            return await self.auth.identify(context)
        except AuthError as e:
            await context.abort(e.code, str(e))
            raise

    async def _check_owner(self, who: Identity, job_id: str, what: str, context: grpc.aio.ServicerContext) -> None:
        owner = self.owners.owner(job_id)
        if self.auth.secure and not may_touch(who.caller, owner):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"user {who.caller.name} may not {what} federated job {job_id}: it is "
                                f"{owner or 'nobody'}'s (only its owner and admins may)")

    def _peer(self, name: str) -> federation_pb2_grpc.GlobalManagerServiceStub | None:
        addr = self.port.peer_address(name)
        return federation_pb2_grpc.GlobalManagerServiceStub(self.port.channel(addr)) if addr else None

    async def Submit(self, request: federation_pb2.FedSubmitRequest, context: grpc.aio.ServicerContext):
        spec = request.spec
        queue = spec.queue or "default"
        who = await self._identify(context)
        allowed = may_submit(who.caller, queue, spec.user, spec.weight or 1.0)
        if self.auth.secure and not allowed.allowed:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, allowed.why)
        try:
            owner = self.port.owner_of(queue)
        except Unavailable as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
        if owner is None:
            await self._no_owner(queue, context)
        if owner != self.port.s.name:
            peer = self._peer(owner)
            if self.port.membership is not None and (request.forwarded or peer is None):
                # with etcd, GMs' views of a takeover or a return differ for a watch round-trip
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"queue {queue!r} is moving to GM {owner!r} "
                                    "(a takeover or a return is in progress); retry")
            if who.cert_user:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                    f"queue {queue!r} " + NOT_FORWARDED.format(gm=owner))
            if request.forwarded or peer is None:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                    f"queue {queue!r} belongs to GM {owner!r}, which this GM cannot reach or "
                                    "already forwarded it here: check --queue-map and --gms agree on every GM")
            try:
                return await peer.Submit(federation_pb2.FedSubmitRequest(spec=spec, forwarded=True), timeout=10,
                                         metadata=_as(who))
            except grpc.aio.AioRpcError as e:
                await context.abort(e.code(), f"forwarded to GM {owner!r}: {e.details()}")
        error = check_spec(spec)
        if error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, error)
        stored = jobs_pb2.JobSpec()
        stored.CopyFrom(spec)
        stored.queue = queue
        job_id = self.port.store.job_of_request(spec.request_id) if spec.request_id else None
        if job_id is not None and self.auth.secure and self.owners.owner(job_id) != who.caller.name:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"spec.request_id: {spec.request_id!r} "
                                "was already used by another user's job; use a new request_id")
        if job_id is None:     # a repeat's tasks were queued by the first: work per Submit is its own job's
            # The owner in the job's own transaction: every Place carries its token.
            def write_owner(new_job: str) -> None:
                self.owners.put(new_job, who.caller.name, owner_secret(who.token, who.cert_user))
            array = array_indexes(spec, MAX_TASKS) if spec.array else None    # checked above
            tasks = array[0] if isinstance(array, tuple) else spec.tasks        # one task per index
            job_id = self.port.store.add_job(self.port.s.index, queue, spec.name, stored.SerializeToString(),
                                             tasks, spec.request_id, also=write_owner if self.auth.secure else None)
            self.port.admit(job_id, self.port.store.tasks("job_id=? AND state='PENDING'", (job_id,)))
        return self.job_pb(self.port.store.job(job_id))

    async def _no_owner(self, queue: str, context: grpc.aio.ServicerContext) -> None:
        if self.port.membership is not None and queue in self.port.membership.facts().queue_map:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"queue {queue!r}: its GM is not alive and no GM has taken it over yet; retry")
        qmap = self.port.membership.facts().queue_map if self.port.membership is not None else self.port.s.queue_map
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"spec.queue: {queue!r} is not a federated queue (known: {', '.join(sorted(qmap))})")


    def job_pb(self, job: JobRow) -> federation_pb2.FedJob:
        rows = self.port.store.tasks("job_id=?", (job.id,))
        names = [link.name for link in self.port.links]
        out = federation_pb2.FedJob(id=job.id, queue=job.queue, gm=self.port.s.name, submitted_at=job.submitted_at,
                                    name=job.name, state=job_state([r.state for r in rows]),
                                    owner=self.owners.owner(job.id))
        for r in rows:
            link = self.port.links[r.lm] if r.lm is not None and r.lm < len(names) else None
            node = ""
            if link is not None and link.layout is not None and r.node is not None and r.node < len(link.layout.names):
                node = link.layout.names[r.node]
            out.tasks.append(federation_pb2.FedTaskStatus(
                index=r.idx, state=r.state, lm=link.name if link and r.state != "PENDING" else "", node=node,
                job_id=r.lm_job, attempts=r.attempt + (r.state != "PENDING"), exit_code=r.exit_code, reason=r.reason,
                preemptions=r.preemptions))
        return out

    async def Get(self, request: federation_pb2.FedGetRequest, context: grpc.aio.ServicerContext):
        who = await self._identify(context)
        job = self.port.store.job(request.id)
        if job is not None:
            await self._check_owner(who, job.id, "read", context)
            return self.job_pb(job)
        return await self._at_owner("Get", request, context, who)

    async def Cancel(self, request: federation_pb2.FedCancelRequest, context: grpc.aio.ServicerContext):
        who = await self._identify(context)
        job = self.port.store.job(request.id)
        if job is None:
            return await self._at_owner("Cancel", request, context, who)
        await self._check_owner(who, job.id, "cancel", context)
        self.port.canceller.request(job.id)          # persisted, pending tasks ended: before the answer
        return self.job_pb(job)

    async def _at_owner(self, method: str, request, context: grpc.aio.ServicerContext, who: Identity):
        """A job id f<gm>-<n> that is not this GM's: asked of GM <gm>."""
        m = re.match(r"^f(\d+)-\d+$", request.id)
        names = self.port.s.gm_names()
        if m and int(m.group(1)) != self.port.s.index and int(m.group(1)) < len(names):
            peer = self._peer(names[int(m.group(1))])
            if peer is not None and who.cert_user:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                    f"job {request.id} " + NOT_FORWARDED.format(gm=names[int(m.group(1))]))
            if peer is not None:
                try:
                    return await getattr(peer, method)(request, timeout=10, metadata=_as(who))
                except grpc.aio.AioRpcError as e:
                    await context.abort(e.code(), e.details())
        await context.abort(grpc.StatusCode.NOT_FOUND, f"id: no federated job {request.id!r} (ids look like f0-12)")

    async def List(self, request: federation_pb2.FedListRequest, context: grpc.aio.ServicerContext):
        who = await self._identify(context)
        limit = request.limit or LIST_DEFAULT
        if limit > LIST_MAX:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"limit: {limit} is over {LIST_MAX}; page through with next_page_token")
        before = None
        if request.page_token:
            if not request.page_token.isdigit():
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"page_token: {request.page_token!r} is not one this GM gave "
                                    "(pass a previous answer's next_page_token, or none for the newest)")
            before = int(request.page_token)
        if self.auth.secure and not who.caller.admin:      # a user lists their own jobs
            jobs, more = self.owners.page(who.caller.name, request.queue, limit, before)
        else:
            jobs, more = self.port.store.page(request.queue, limit, before)
        return federation_pb2.FedListResponse(jobs=[self.job_pb(j) for j in jobs],
                                              next_page_token="" if more is None else str(more))

    async def Status(self, request: federation_pb2.FedStatusRequest, context: grpc.aio.ServicerContext):
        await self._identify(context)          # default deny: a secure GM's state is for its users
        d, now = self.port, time.monotonic()
        st = d.gm.stats
        me = federation_pb2.GMInfo(
            name=d.s.name, index=d.s.index, address=d.s.listen, alive=True, pending=d.gm.pending() + len(d.unanswered),
            queues=sorted(q for q, g in d.s.queue_map.items() if g == d.s.name), launches=st.launches,
            repartitions=st.repartitions, inconsistencies=st.internal_inconsistencies + st.external_inconsistencies,
            preemptions=st.preemptions)
        out = federation_pb2.FedStatus(gm=d.s.name, gms=[me], membership="static")
        if d.membership is not None:
            from tcluster.gm.fedstatus import etcd_members
            etcd_members(d, out)
        for i, link in enumerate(d.links):
            info = federation_pb2.LMInfo(name=link.name, index=i, address=link.addr or "|".join(link.addrs),
                                         connected=link.connected,
                                         view_age_s=now - link.last_state if link.last_state else -1.0)
            if link.layout is not None and link.view is not None:
                info.epoch, info.nodes = link.layout.epoch, len(link.layout.names)
                info.partition_nodes.extend(len(p.nodes) for p in link.view.parts)
                info.free.v.extend([sum(f[0] for f in link.view.free), sum(f[1] for f in link.view.free)])
            out.lms.append(info)
        return out


def _as(who: Identity) -> tuple[tuple[str, str], ...]:
    """The caller's token, for the GM a call is forwarded to (it checks the same rules)."""
    return (("authorization", f"Bearer {who.token}"),) if who.token else ()
