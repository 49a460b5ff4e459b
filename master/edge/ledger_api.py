"""The usage ledger's gRPC calls (`tcl report`, `tcl history`): messages to the service's
values and back; the service (master/ledger.py) decides who sees which rows."""

from __future__ import annotations

from tcluster.domain.errors import Unavailable
from tcluster.domain.ledger import LedgerRow, ReportLine
from tcluster.master.ledger import UsageLedger
from tcluster.master.service import MasterService
from tcluster.security.authz import Caller
from tcluster.v1 import jobs_pb2


def line_to_pb(line: ReportLine) -> jobs_pb2.ReportLine:
    return jobs_pb2.ReportLine(key=line.key, cpu_hours=line.cpu_hours, gpu_hours=line.gpu_hours, jobs=line.jobs,
                               attempts=line.attempts, failures=line.failures, wall_hours=line.wall_hours)


def row_to_pb(r: LedgerRow) -> jobs_pb2.LedgerRow:
    return jobs_pb2.LedgerRow(
        job_id=r.job_id, index=r.index, attempt=r.attempt, user=r.user, queue=r.queue, node=r.node, state=r.state,
        reason=r.reason, exit_code=r.exit_code or 0, has_exit_code=r.exit_code is not None,
        started_at=r.started_at, ended_at=r.ended_at, cpu_seconds=r.cpu_seconds,
        memory_peak_bytes=r.memory_peak_bytes, gpu_seconds=r.gpu_seconds, cpu_request=r.cpu_request)


def _ledger(service: MasterService) -> UsageLedger:
    if service.ledger is None:
        raise Unavailable("the usage ledger cannot be read on this master (see its log)")
    return service.ledger


async def report(service: MasterService, caller: Caller, request: jobs_pb2.ReportRequest) -> jobs_pb2.ReportResponse:
    answer = await _ledger(service).report(caller, request.since, request.until, request.by or "user")
    return jobs_pb2.ReportResponse(lines=[line_to_pb(line) for line in answer.lines], since=answer.since,
                                   until=answer.until, by=answer.by, own_only=answer.own_only)


async def history(service: MasterService, caller: Caller,
                  request: jobs_pb2.HistoryRequest) -> jobs_pb2.HistoryResponse:
    rows = await _ledger(service).history(caller, request.user, request.since, request.until, list(request.states),
                                          request.limit)
    return jobs_pb2.HistoryResponse(rows=[row_to_pb(r) for r in rows])


__all__ = ["history", "report"]
