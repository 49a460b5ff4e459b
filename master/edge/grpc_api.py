"""Thin gRPC servicers: convert the message, call the service, convert back.
One table maps domain errors to status codes."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import AsyncIterator, Awaitable, Callable

import grpc

from tcluster.domain.errors import (
    FailedPrecondition, InvalidArgument, NotFound, PermissionDenied, ResourceExhausted, TclusterError,
    Unauthenticated, Unavailable,
)
from tcluster.master.core.actions import Heartbeat, LogPiece, Registration, ReportBatch
from tcluster.master import lifecycle
from tcluster.master.edge import ledger_api
from tcluster.master.edge.agent_clock import AgentClock
from tcluster.master.core.execio import ExecPiece
from tcluster.master.edge import exec_api, ledger_api
from tcluster.master.edge.agent_codec import inbound_from_pb, outbound_to_pbs
from tcluster.master.identity.gate import bearer_token
from tcluster.master.identity.joining import NodeGuard
from tcluster.master.links import AgentLink
from tcluster.master.identity.peer import peer_cert
from tcluster.master.nodeadmin import NodeRequest
from tcluster.master.paging import token_after
from tcluster.master.edge.taskpages import add_ranges, inline_rows, tasks_page
from tcluster.master.execs import exec_in_task
from tcluster.master.service import MasterService
from tcluster.master.usagewatch import checked_watch_s
from tcluster.domain.model import Job, Task
from tcluster.security.authz import Caller, ReadCluster
from tcluster.v1 import agent_pb2, agent_pb2_grpc, jobs_pb2, jobs_pb2_grpc
from tcluster.daemonkit.timeouts import wait_for
from tcluster.wire.protobuf import (
    job_state_from_pb, job_to_pb, lotes_status_to_pb, node_to_pb, queue_to_pb, resources_to_pb, spec_from_pb,
)

log = logging.getLogger(__name__)


def spec_changes_from_pb(request: jobs_pb2.UpdateJobRequest) -> lifecycle.SpecChanges:
    def field(name: str) -> object:
        return getattr(request, name) if request.HasField(name) else None
    return lifecycle.SpecChanges(field("cpu"), field("memory"), field("time_limit_s"),  # type: ignore[arg-type]
                                 field("queue"), field("weight"))  # type: ignore[arg-type]


REGISTER_TIMEOUT_S = 30.0
# A List reply's bytes, well under the 4 MiB message bound (the header and total aside).
LIST_BYTE_BUDGET = 3 * 2**20
# One job's message in a List above this (a spec near its bound, ranges that did not
# compact) is listed by id and why: alone in a page it would still pass the 4 MiB bound.
LIST_JOB_BYTE_LIMIT = 3 * 2**20
# The master's wall clock, sent as initial metadata on ListNodes and Join (calls a node may
# make before it has a user's token): `tcl doctor` measures a node's clock skew with it.
MASTER_TIME_KEY = "tcl-master-time"


async def send_master_time(context: grpc.aio.ServicerContext) -> None:
    await context.send_initial_metadata(((MASTER_TIME_KEY, f"{time.time():.6f}"),))

STATUS_FOR_ERROR: dict[type[TclusterError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def status_for(error: Exception) -> grpc.StatusCode:
    """By the error's class or its nearest listed base (a YamlConfigError is an InvalidArgument)."""
    for cls in type(error).__mro__:
        if cls in STATUS_FOR_ERROR:
            return STATUS_FOR_ERROR[cls]
    return grpc.StatusCode.INTERNAL


async def abort_with(context: grpc.aio.ServicerContext, error: Exception) -> None:
    """Ends the call with the status the table gives the error (an unexpected one logged)."""
    code = status_for(error)
    if code is grpc.StatusCode.INTERNAL:
        log.exception("internal error", exc_info=error)
    await context.abort(code, str(error))


def caller_of(service: MasterService, context: grpc.aio.ServicerContext, call: str) -> Caller:
    """From the `authorization: Bearer` metadata; Unauthenticated without a valid token."""
    return service.gate.caller(bearer_token(context.invocation_metadata()), context.peer(), call)


class JobServicer(jobs_pb2_grpc.JobServiceServicer):
    def __init__(self, service: MasterService) -> None:
        self.service = service

    def _job(self, pair: tuple[Job, list[Task]], caller: Caller) -> jobs_pb2.Job:
        """Redacted here, on the master, for a caller who may not read the job's secrets."""
        lotes = self.service.plugins.lotes
        pair = self.service.shown(pair, caller)
        board = self.service.gpus
        msg = job_to_pb(pair[0], inline_rows(pair[1]), dominant_share=self.service.dominant_share(*pair),
                        lotes_class=lotes.klass(pair[0].spec.resources) if lotes is not None else None,
                        gpu_usage=lambda t: board.of_task(t.node, t.id, t.attempt))
        add_ranges(msg, pair[1])        # a job with many rows: ranges, not rows (master/edge/taskpages.py)
        return msg

    async def GetJobTasks(self, request: jobs_pb2.JobTasksPageRequest,
                          context: grpc.aio.ServicerContext) -> jobs_pb2.JobTasksPage:
        try:
            caller = caller_of(self.service, context, "GetJobTasks")
            job, tasks = self.service.shown(self.service.read(request.id, caller), caller)
            return tasks_page(tasks, request.start_index, request.limit)
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")

    async def Submit(self, request: jobs_pb2.SubmitRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.Job:
        try:
            caller = caller_of(self.service, context, "Submit")
            return self._job(await self.service.submit(spec_from_pb(request.spec), caller), caller)
        except (TclusterError, ValueError) as error:
            await abort_with(context, error if isinstance(error, TclusterError) else InvalidArgument("spec", str(error)[:200]))
            raise AssertionError("unreachable")

    async def Get(self, request: jobs_pb2.GetJobRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.Job:
        try:
            caller = caller_of(self.service, context, "Get")
            pair = self.service.read(request.id, caller)
            self.service.agents.watch_jobs([pair], checked_watch_s(request.watch_usage_s))
            return self._job(pair, caller)
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")

    async def List(self, request: jobs_pb2.ListJobsRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.ListJobsResponse:
        try:
            states = {job_state_from_pb(s) for s in request.states}
        except ValueError as error:
            await abort_with(context, InvalidArgument("states", str(error)))
        try:
            caller = caller_of(self.service, context, "List")
            pairs, next_token, total = self.service.list_jobs(states, request.queue, request.limit, request.all,
                                                              request.page_token, request.owner, caller)
            self.service.agents.watch_jobs(pairs, checked_watch_s(request.watch_usage_s))
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")
        return self._list_reply(pairs, next_token, total, caller)

    def _list_reply(self, pairs: list[tuple[Job, list[Task]]], next_token: str, total: int,
                    caller: Caller) -> jobs_pb2.ListJobsResponse:
        """A page cut short where its bytes would pass LIST_BYTE_BUDGET (issue 36 #6: twelve
        10,000-task jobs made a 4.65 MB reply that failed `tcl jobs` for everybody); the next
        page starts after its last job. One job is always sent, however big."""
        reply, size = jobs_pb2.ListJobsResponse(total=total), 0
        for n, (job, tasks) in enumerate(pairs):
            message = self._listed(job, tasks, caller)
            size += message.ByteSize() + 8            # the field's tag and length
            if n and size > LIST_BYTE_BUDGET:
                reply.next_page_token = token_after(pairs[n - 1][0])
                return reply
            reply.jobs.append(message)
        reply.next_page_token = next_token
        return reply

    def _listed(self, job: Job, tasks: list[Task], caller: Caller) -> jobs_pb2.Job:
        """One job of a List; one that cannot be encoded (a value out of its field's range,
        written by an older version) is shown by id and why, never failing the List of
        everybody's jobs (issue 36 #3)."""
        try:
            message = self._job((job, tasks), caller)
        except (ValueError, TypeError, OverflowError) as error:
            log.error("job %s cannot be encoded for List: %s", job.id, error)
            return jobs_pb2.Job(id=job.id, submitted_at=job.submitted_at,
                                reason=f"this job cannot be shown: {str(error)[:200]}")
        if message.ByteSize() > LIST_JOB_BYTE_LIMIT:    # would not fit even alone: by id and why
            return jobs_pb2.Job(id=job.id, submitted_at=job.submitted_at, state=message.state,
                                reason=f"this job is too big to list ({message.ByteSize()} bytes): tcl status {job.id}")
        return message

    async def Report(self, request: jobs_pb2.ReportRequest,
                     context: grpc.aio.ServicerContext) -> jobs_pb2.ReportResponse:
        try:
            return await ledger_api.report(self.service, caller_of(self.service, context, "Report"), request)
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")

    async def History(self, request: jobs_pb2.HistoryRequest,
                      context: grpc.aio.ServicerContext) -> jobs_pb2.HistoryResponse:
        try:
            return await ledger_api.history(self.service, caller_of(self.service, context, "History"), request)
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")

    async def Cancel(self, request: jobs_pb2.CancelJobRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.Job:
        try:
            caller = caller_of(self.service, context, "Cancel")
            return self._job(await self.service.cancel(request.id, caller, request.tasks), caller)
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")

    async def Update(self, request: jobs_pb2.UpdateJobRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.Job:
        try:
            caller = caller_of(self.service, context, "Update")
            throttle = request.throttle if request.HasField("throttle") else None
            return self._job(await lifecycle.update(self.service, request.id, caller, throttle,
                                                    spec_changes_from_pb(request)), caller)
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")

    async def Hold(self, request: jobs_pb2.HoldJobRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.Job:
        return await self._verb(context, "Hold", lambda caller: lifecycle.hold(self.service, request.id, caller, True))

    async def Release(self, request: jobs_pb2.ReleaseJobRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.Job:
        return await self._verb(context, "Release",
                                lambda caller: lifecycle.hold(self.service, request.id, caller, False))

    async def Requeue(self, request: jobs_pb2.RequeueJobRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.Job:
        return await self._verb(context, "Requeue",
                                lambda caller: lifecycle.requeue(self.service, request.id, caller, request.tasks))

    async def _verb(self, context: grpc.aio.ServicerContext, call: str,
                    act: Callable[[Caller], Awaitable[tuple[Job, list[Task]]]]) -> jobs_pb2.Job:
        try:
            caller = caller_of(self.service, context, call)
            return self._job(await act(caller), caller)
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")

    async def Logs(self, request: jobs_pb2.LogsRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[jobs_pb2.LogChunk]:
        stderr = request.stream == jobs_pb2.LOG_STDERR
        try:
            caller = caller_of(self.service, context, "Logs")
            async for data in self.service.logs(request.job_id, request.task_index, stderr, request.tail_bytes,
                                                request.follow, caller, request.attempt):
                yield jobs_pb2.LogChunk(data=data)
        except TclusterError as error:
            await abort_with(context, error)


    async def Exec(self, request_iterator: AsyncIterator[jobs_pb2.ExecRequest],
                   context: grpc.aio.ServicerContext) -> AsyncIterator[jobs_pb2.ExecReply]:
        try:
            caller = caller_of(self.service, context, "Exec")
            first = await wait_for(request_iterator.__anext__(), REGISTER_TIMEOUT_S)
            outputs = exec_in_task(self.service, self.service.execs, caller, exec_api.opened_from_pb(first),
                                   exec_api.inputs_from_pb(request_iterator))
            async for out in outputs:
                yield exec_api.output_to_pb(out)
        except (StopAsyncIteration, asyncio.TimeoutError):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "an Exec stream must open with an ExecOpen")
        except TclusterError as error:
            await abort_with(context, error)


class ClusterServicer(jobs_pb2_grpc.ClusterServiceServicer):
    def __init__(self, service: MasterService) -> None:
        self.service = service

    async def ListNodes(self, request: jobs_pb2.ListNodesRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.ListNodesResponse:
        await send_master_time(context)
        lotes = self.service.plugins.lotes
        try:
            listed = self.service.nodes(caller_of(self.service, context, "ListNodes"))
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")
        nodes = [node_to_pb(n, self.service.free(n), tasks, lotes.node_view(n.name) if lotes is not None else None,
                            self.service.drain_blockers(n.name)) for n, tasks in listed]
        response = jobs_pb2.ListNodesResponse(nodes=nodes, placement=self.service.placement.name)
        if lotes is not None:
            response.lotes.CopyFrom(lotes_status_to_pb(lotes.status_view()))
        return response

    async def OperateNodes(self, request: jobs_pb2.OperateNodesRequest,
                           context: grpc.aio.ServicerContext) -> jobs_pb2.OperateNodesResponse:
        ask = NodeRequest(request.op, tuple(request.nodes), request.reason, request.deadline_s, request.start,
                          request.duration_s)
        try:
            done = await self.service.operate_nodes(ask, caller_of(self.service, context, "OperateNodes"))
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")
        return jobs_pb2.OperateNodesResponse(nodes=[
            node_to_pb(n, self.service.free(n), tasks, blockers=self.service.drain_blockers(n.name))
            for n, tasks in done])

    async def ListQueues(self, request: jobs_pb2.ListQueuesRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.ListQueuesResponse:
        try:
            listed = self.service.list_queues(caller_of(self.service, context, "ListQueues"))
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")
        return jobs_pb2.ListQueuesResponse(
            queues=[queue_to_pb(row) for row in listed],
            fairness=self.service.rounds.fairness.name, source=self.service.queues.source,
            capacity=resources_to_pb(self.service.total_capacity()),
        )

    async def WhoAmI(self, request: jobs_pb2.WhoAmIRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.WhoAmIResponse:
        try:
            caller = caller_of(self.service, context, "WhoAmI")
            self.service.gate.check(caller, ReadCluster("whoami"))
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")
        return jobs_pb2.WhoAmIResponse(name=caller.name, admin=caller.admin, unix_user=caller.unix_user,
                                       queues=list(caller.grants), secure=self.service.gate.secure)


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    """One Connect stream per agent: Register first, then heartbeats, events and log data.
    With a guard (a secure master), the stream's client certificate must name the node."""

    def __init__(self, service: MasterService, guard: NodeGuard | None = None) -> None:
        self.service = service
        self.guard = guard
        self.clocks: dict[AgentLink, AgentClock] = {}     # each stream's agent clock (agent_clock.py)

    async def Connect(self, request_iterator: AsyncIterator[agent_pb2.AgentMessage], context: grpc.aio.ServicerContext) -> AsyncIterator[agent_pb2.MasterMessage]:
        clock = AgentClock()
        link = await self._register(request_iterator, context, clock)
        self.clocks[link] = clock
        reader = asyncio.create_task(self._read(request_iterator, link))
        try:
            while (message := await link.next_outbound()) is not None:
                for piece in outbound_to_pbs(message):
                    yield piece
            if self.guard is not None and self.guard.forget(link):
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"node {link.node}'s certificate was revoked")
        finally:
            reader.cancel()
            self.clocks.pop(link, None)
            self.service.agents.detach(link)
            if self.guard is not None:
                self.guard.forget(link)

    async def _register(self, requests: AsyncIterator[agent_pb2.AgentMessage], context: grpc.aio.ServicerContext,
                        clock: AgentClock) -> AgentLink:
        try:
            message = await wait_for(requests.__anext__(), REGISTER_TIMEOUT_S)
            first = inbound_from_pb(message)
            if not isinstance(first, Registration):
                raise InvalidArgument("register", "the first message on a stream must be Register")
            clock.heard(message.register.sent_at, time.time())
            first = replace(first, reports=clock.to_master(first.reports))
            if self.guard is None:
                return self.service.agents.attach(first)
            admitted, serial = self.guard.admit(peer_cert(context), first)
            link = self.service.agents.attach(admitted)
            self.guard.track(link, serial)
            return link
        except StopAsyncIteration:
            await context.abort(grpc.StatusCode.CANCELLED, "stream closed before Register")
        except asyncio.TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"no Register within {REGISTER_TIMEOUT_S:.0f}s")
        except (TclusterError, ValueError) as error:
            await abort_with(context, error if isinstance(error, TclusterError) else InvalidArgument("register", str(error)))
        raise AssertionError("unreachable")

    async def _read(self, requests: AsyncIterator[agent_pb2.AgentMessage], link: AgentLink) -> None:
        try:
            async for message in requests:
                self._handle(link, message)
        except Exception as error:  # stream broken or cancelled: the writer side cleans up
            log.info("stream from %s ended: %s", link.node, error)
        finally:
            link.close()

    def _handle(self, link: AgentLink, message: agent_pb2.AgentMessage) -> None:
        try:
            inbound = inbound_from_pb(message)
        except ValueError as error:  # malformed: drop this message, keep the stream
            log.warning("dropping malformed message from %s: %s", link.node, error)
            return
        clock = self.clocks.get(link)
        if isinstance(inbound, Heartbeat):
            if clock is not None:
                clock.heard(message.heartbeat.sent_at, time.time())
            self.service.agents.on_heartbeat(link, inbound)
        elif isinstance(inbound, ReportBatch):
            if clock is not None:
                inbound = replace(inbound, reports=clock.to_master(inbound.reports))
            self.service.agents.on_reports(link, inbound)
        elif isinstance(inbound, LogPiece):
            self.service.agents.on_log_piece(link, inbound)
        elif isinstance(inbound, ExecPiece):
            self.service.agents.on_exec_piece(link, inbound)
        else:
            log.warning("node %s sent Register twice; ignoring", link.node)
