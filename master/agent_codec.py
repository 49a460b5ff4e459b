"""pb <-> domain for the agent stream, master side. Raises ValueError on malformed input."""

from __future__ import annotations

import math

from tcluster.master.actions import (
    AckReports, FetchLog, Heartbeat, Kill, Launch, LogPiece, Outbound, Registration, ReportBatch,
    TaskReport, Welcome,
)
from tcluster.v1 import agent_pb2
from tcluster.wire import resources_from_pb, spec_to_pb, task_state_from_pb, usage_from_pb

Inbound = Registration | Heartbeat | ReportBatch | LogPiece


def report_from_pb(event: agent_pb2.TaskEvent) -> TaskReport:
    if not event.task_id:
        raise ValueError("task event without task_id")
    if not math.isfinite(event.at):
        raise ValueError(f"task event {event.task_id}: time {event.at!r} is not finite")
    return TaskReport(
        task_id=event.task_id, attempt=event.attempt, state=task_state_from_pb(event.state),
        exit_code=event.exit_code if event.has_exit_code else None, signal=event.signal,
        reason=event.reason, at=event.at,
        usage=usage_from_pb(event.usage) if event.HasField("usage") else None, rejected=event.rejected,
    )


def registration_from_pb(msg: agent_pb2.Register) -> Registration:
    reports = tuple(report_from_pb(e) for e in msg.pending_events)
    return Registration(
        node=msg.node, capacity=resources_from_pb(msg.capacity), reserved=resources_from_pb(msg.reserved),
        labels=tuple(sorted(msg.labels.items())), runtime=msg.runtime,
        running=tuple((t.task_id, t.attempt) for t in msg.running), reports=reports,
        last_seq=max((e.seq for e in msg.pending_events), default=0),
    )


def inbound_from_pb(msg: agent_pb2.AgentMessage) -> Inbound:
    kind = msg.WhichOneof("kind")
    if kind == "register":
        return registration_from_pb(msg.register)
    if kind == "heartbeat":
        usage = {u.task_id: (u.attempt, usage_from_pb(u)) for u in msg.heartbeat.usage if u.task_id}
        return Heartbeat(free=resources_from_pb(msg.heartbeat.free), usage=usage)
    if kind == "events":
        events = msg.events.events
        return ReportBatch(tuple(report_from_pb(e) for e in events), max((e.seq for e in events), default=0))
    if kind == "log_data":
        d = msg.log_data
        return LogPiece(d.request_id, d.data, d.eof, d.error)
    raise ValueError(f"agent message without a known kind ({kind!r})")


def outbound_to_pb(message: Outbound) -> agent_pb2.MasterMessage:
    if isinstance(message, Launch):
        return agent_pb2.MasterMessage(launch=agent_pb2.LaunchTask(
            task_id=message.task_id, attempt=message.attempt, job_id=message.job_id, index=message.index,
            spec=spec_to_pb(message.spec),
        ))
    if isinstance(message, Kill):
        return agent_pb2.MasterMessage(kill=agent_pb2.KillTask(
            task_id=message.task_id, attempt=message.attempt, reason=message.reason))
    if isinstance(message, Welcome):
        return agent_pb2.MasterMessage(registered=agent_pb2.Registered(
            heartbeat_interval_s=message.heartbeat_interval_s,
            kills=[agent_pb2.KillTask(task_id=t, attempt=0, reason="the master no longer wants this task")
                   for t in message.kill_task_ids]))
    if isinstance(message, AckReports):
        return agent_pb2.MasterMessage(ack=agent_pb2.Ack(seq=message.seq))
    if isinstance(message, FetchLog):
        return agent_pb2.MasterMessage(log_request=agent_pb2.LogRequest(
            request_id=message.request_id, task_id=message.task_id, stderr=message.stderr,
            tail_bytes=message.tail_bytes, max_bytes=message.max_bytes))
    raise TypeError(f"cannot send {type(message).__name__}")
