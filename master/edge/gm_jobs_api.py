"""JobService on the mutual-TLS port, for GMs only: Get and Cancel of the jobs the LM service
made for federated tasks. A GM reconciles tasks that ended while it was down (Get) and
cancels placed tasks (Cancel) through these; with a GM certificate it needs no token, and
the certificate reaches no job but the federation's (NotFound, as for a missing job)."""

from __future__ import annotations

from typing import Any

import grpc

from tcluster.domain.errors import NotFound, TclusterError
from tcluster.master.core.pinning import FED_TASK
from tcluster.master.edge.grpc_api import JobServicer, abort_with
from tcluster.master.identity.gmguard import GMGuard
from tcluster.master.identity.peer import peer_cert
from tcluster.security.authz import Caller
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc


class GMJobServicer(jobs_pb2_grpc.JobServiceServicer):
    def __init__(self, jobs: JobServicer, guard: GMGuard) -> None:
        self.jobs, self.guard = jobs, guard

    def _read(self, context: grpc.aio.ServicerContext, job_id: str, call: str) -> tuple[Caller, Any]:
        """The GM as a caller, and the job it asks for (read once)."""
        gm, _ = self.guard.admit(peer_cert(context), call)
        caller = Caller(f"gm:{gm}", True, "", ("*",))
        found = self.jobs.service.read(job_id, caller)
        if not dict(found[0].spec.labels).get(FED_TASK):
            raise NotFound(f"job {job_id[:64]} not found")   # a GM certificate reaches federation jobs only
        return caller, found

    async def Get(self, request: jobs_pb2.GetJobRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.Job:
        try:
            caller, found = self._read(context, request.id, "Get")
            return self.jobs._job(found, caller)
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")

    async def Cancel(self, request: jobs_pb2.CancelJobRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.Job:
        try:
            caller, _ = self._read(context, request.id, "Cancel")
            return self.jobs._job(await self.jobs.service.cancel(request.id, caller, request.tasks), caller)
        except TclusterError as error:
            await abort_with(context, error)
            raise AssertionError("unreachable")
