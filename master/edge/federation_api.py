"""LocalManagerService (proto/tcluster/v1/federation.proto), thin: the wire to the pure
federation messages and back; the logic is master/features/federation_live.py. On a secure master
callers need a live GM certificate of this cluster on the mutual-TLS (agent) port, or an
admin's token on the client port (a GM acts for every user of its queues)."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

import grpc

from tcluster.domain.errors import FailedPrecondition, InvalidArgument, PermissionDenied, TclusterError
from tcluster.federation.messages import (
    Answer, Inconsistent, InconsistencyKind, InternalLaunch, TaskLaunched, LMState, PreemptAndLaunch, Refused, RepartitionAndLaunch, Request,
    Res, TaskRequest, Why,
)
from tcluster.master.edge.grpc_api import abort_with, caller_of
from tcluster.master.edge.federation_users import admitter, place_caller, user_named
from tcluster.master.features.federation_live import Ended, LiveLM, Update
from tcluster.master.features.federation_lm import LiveLayout
from tcluster.master.identity.gmguard import GMGuard
from tcluster.master.identity.peer import peer_cert
from tcluster.master.service import MasterService
from tcluster.domain.model import TaskState
from tcluster.v1 import common_pb2, federation_pb2, federation_pb2_grpc
from tcluster.wire.protobuf import spec_from_pb

_KIND = {InconsistencyKind.INTERNAL: federation_pb2.INCONSISTENCY_INTERNAL, InconsistencyKind.EXTERNAL: federation_pb2.INCONSISTENCY_EXTERNAL}
_WHY = {Why.INSUFFICIENT: federation_pb2.WHY_INSUFFICIENT, Why.NOT_IN_PARTITION: federation_pb2.WHY_NOT_IN_PARTITION,
        Why.VICTIM_GONE: federation_pb2.WHY_VICTIM_GONE, Why.UNKNOWN_NODE: federation_pb2.WHY_UNKNOWN_NODE}
_TASK_STATE = {TaskState.SUCCEEDED: common_pb2.TASK_SUCCEEDED, TaskState.FAILED: common_pb2.TASK_FAILED,
               TaskState.KILLED: common_pb2.TASK_KILLED, TaskState.LOST: common_pb2.TASK_LOST}


def res_pb(res: Res) -> federation_pb2.Res:
    return federation_pb2.Res(v=list(res))


def res_from_pb(msg: federation_pb2.Res, what: str) -> Res:
    if len(msg.v) < 2 or any(x < 0 for x in msg.v[:2]):
        raise InvalidArgument(what, f"{list(msg.v)[:4]} is not [millicores, memory MiB] (two integers >= 0)")
    return (int(msg.v[0]), int(msg.v[1]))


def layout_pb(live: LiveLayout) -> federation_pb2.LMLayout:
    nodes = [federation_pb2.FedNode(name=name, cap=res_pb(spec.cap), cmask=spec.cmask, owner=owner)
             for name, spec, owner in zip(live.names, live.layout.nodes, live.layout.owner)]
    return federation_pb2.LMLayout(lm=live.layout.lm, gms=live.gms, nodes=nodes, constraints=list(live.constraints),
                                   epoch=live.epoch, name=live.name)


def state_pb(s: LMState) -> federation_pb2.LMState:
    return federation_pb2.LMState(
        lm=s.lm, epoch=s.epoch, version=s.version, free=[res_pb(f) for f in s.free],
        logical=[federation_pb2.LogicalNode(phys=n.phys, cap=res_pb(n.cap), owner=n.owner, task_id=n.task_id)
                 for n in s.logical],
        usage=[federation_pb2.QueueUsage(queue=q, used=res_pb(r)) for q, r in s.usage],
        tasks=[federation_pb2.TaskOn(task_id=t.task_id, queue=t.queue, node=t.node, req=res_pb(t.req))
               for t in s.tasks], closed=list(s.closed))


def ended_pb(e: Ended) -> federation_pb2.FedTaskEnded:
    d = e.delta
    return federation_pb2.FedTaskEnded(lm=d.lm, epoch=d.epoch, version=d.version, task_id=d.task_id, node=d.node,
                                       node_free=res_pb(d.node_free), preempted=d.preempted,
                                       state=_TASK_STATE.get(e.state, common_pb2.TASK_STATE_UNSPECIFIED),
                                       exit_code=e.exit_code, reason=e.reason[:1024], job_id=e.job_id)


def update_pb(update: Update) -> federation_pb2.LMUpdate:
    if isinstance(update, LiveLayout):
        return federation_pb2.LMUpdate(layout=layout_pb(update))
    if isinstance(update, LMState):
        return federation_pb2.LMUpdate(state=state_pb(update))
    return federation_pb2.LMUpdate(ended=ended_pb(update))


def request_from_pb(msg: federation_pb2.PlaceRequest) -> Request:
    if not msg.request_id:
        raise InvalidArgument("request_id", "is empty; use <task_id>:<attempt>")
    if not msg.task.task_id:
        raise InvalidArgument("task.task_id", "is empty; use <federated job id>.<index>")
    task = TaskRequest(msg.task.task_id, msg.task.queue, res_from_pb(msg.task.req, "task.req"), msg.task.pc)
    how = msg.WhichOneof("how")
    if how == "launch":
        return InternalLaunch(msg.request_id, msg.gm, msg.epoch, msg.node, task)
    if how == "repartition":
        return RepartitionAndLaunch(msg.request_id, msg.gm, msg.epoch, msg.repartition.src, msg.node, task)
    if how == "preempt":
        return PreemptAndLaunch(msg.request_id, msg.gm, msg.epoch, msg.node, tuple(msg.preempt.victims), task)
    raise InvalidArgument("how", "is not set; one of launch, repartition, preempt")


def answer_pb(answer: Answer, job_id: str) -> federation_pb2.PlaceAnswer:
    out = federation_pb2.PlaceAnswer(request_id=answer.request_id, task_id=answer.task_id, lm=answer.lm,
                                     state=state_pb(answer.state))
    if isinstance(answer, TaskLaunched):
        out.launched.CopyFrom(federation_pb2.Placed(node=answer.node, logical=answer.logical,
                                                    preempted=list(answer.preempted), job_id=job_id))
    elif isinstance(answer, Inconsistent):
        out.inconsistent.CopyFrom(federation_pb2.Inconsistent(kind=_KIND[answer.kind], why=_WHY[answer.why]))
    elif isinstance(answer, Refused):
        out.refused.CopyFrom(federation_pb2.StaleEpoch(epoch=answer.epoch))
    return out


class LocalManagerServicer(federation_pb2_grpc.LocalManagerServiceServicer):
    def __init__(self, service: MasterService, gm_guard: GMGuard | None = None) -> None:
        self.service = service
        self.gm_guard = gm_guard     # set on the mutual-TLS port: a GM certificate, not a token
        self.lm: LiveLM | None = None    # set with the service when this master leads (--federation-lm-id)

    def _lm(self, context: grpc.aio.ServicerContext, call: str, gm_index: int | None = None) -> LiveLM:
        if self.gm_guard is not None:
            self.gm_guard.admit(peer_cert(context), call, gm_index)
        elif self.service.gate.secure and not caller_of(self.service, context, call).admin:
            raise PermissionDenied(f"{call}: only a global manager (an admin token) may call the LM service")
        if self.lm is None:
            raise FailedPrecondition("this master is not a federation LM (start it with --federation-lm-id N)")
        return self.lm

    async def Subscribe(self, request: federation_pb2.SubscribeRequest,
                        context: grpc.aio.ServicerContext) -> AsyncIterator[federation_pb2.LMUpdate]:
        try:
            lm = self._lm(context, "Subscribe", request.gm)
            sub = lm.subscribe(request.gm, request.gm_name[:64])
        except TclusterError as error:
            await abort_with(context, error)
            return
        try:
            while (update := await lm.next_update(sub)) is not None:
                if self.gm_guard is not None:    # a GM revoked while subscribed stops getting views
                    self.gm_guard.admit(peer_cert(context), "Subscribe", request.gm)
                yield update_pb(update)
        except TclusterError as error:
            await abort_with(context, error)
        except asyncio.CancelledError:
            return        # the GM went away (or the master stops): an ordinary end, not an error to log
        finally:
            lm.unsubscribe(sub)

    async def Place(self, request: federation_pb2.PlaceRequest,
                    context: grpc.aio.ServicerContext) -> federation_pb2.PlaceAnswer:
        try:
            lm = self._lm(context, "Place", request.gm)
            try:
                spec = spec_from_pb(request.task.spec)
            except ValueError as error:
                raise InvalidArgument("task.spec", str(error)[:200]) from error
            caller = place_caller(self.service, request.user_token, context.peer(), request.cert_user)
            req = request_from_pb(request)
            lm.counters.in_flight += 1
            try:
                answer, job_id = await lm.place(req, spec, admitter(self.service, caller),
                                                user=caller.name if self.service.gate.secure else "")
            finally:
                lm.counters.in_flight -= 1
            lm.counters.count(req, answer)
            return answer_pb(answer, job_id)
        except ValueError as error:          # a new request id for a task that already runs here
            await abort_with(context, FailedPrecondition(str(error)))
        except TclusterError as error:
            await abort_with(context, error)
        raise AssertionError("unreachable")

    async def GMAuthenticate(self, request: federation_pb2.GMAuthRequest,
                             context: grpc.aio.ServicerContext) -> federation_pb2.GMAuthAnswer:
        """A GM asks who a bearer token names here (its callers' tokens are this LM's users')."""
        try:
            self._lm(context, "GMAuthenticate")
            if not self.service.gate.secure:
                return federation_pb2.GMAuthAnswer(user="anonymous", admin=True, grants=["*"], secure=False)
            caller = (user_named(self.service, request.cert_user) if request.cert_user and not request.token
                      else self.service.gate.caller(request.token, context.peer(), "GMAuthenticate"))
            return federation_pb2.GMAuthAnswer(user=caller.name, admin=caller.admin, grants=list(caller.grants),
                                               secure=True, unix_user=caller.unix_user)
        except TclusterError as error:
            await abort_with(context, error)
        raise AssertionError("unreachable")
