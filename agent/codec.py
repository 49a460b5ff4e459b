"""pb <-> domain for the agent stream, agent side."""

from __future__ import annotations

from tcluster.domain.ceilings import Ceilings
from tcluster.wire.features import AGENT_FEATURES
from tcluster.domain.launch import Launch
from tcluster.domain.model import TaskUsage
from tcluster.domain.reports import TaskReport
from tcluster.domain.resources import Resources
from tcluster.v1 import agent_pb2
from tcluster.domain.gpuusage import GpuSample
from tcluster.wire.protobuf import gpu_usage_to_pb, resources_to_pb, task_state_to_pb, usage_to_pb


def event_to_pb(seq: int, r: TaskReport) -> agent_pb2.TaskEvent:
    event = agent_pb2.TaskEvent(
        seq=seq, task_id=r.task_id, attempt=r.attempt, state=task_state_to_pb(r.state),
        has_exit_code=r.exit_code is not None, exit_code=r.exit_code or 0, signal=r.signal,
        reason=r.reason, at=r.at, rejected=r.rejected, gpus=r.gpus,
    )
    if r.usage is not None:
        event.usage.CopyFrom(usage_to_pb(r.usage, r.task_id, r.attempt))
    return event


def register_to_pb(node: str, capacity: Resources, reserved: Resources, labels: dict[str, str], runtime: str,
                   running: list[Launch], pending: list[tuple[int, TaskReport]],
                   version: str = "", ceilings: Ceilings = Ceilings(), features: tuple[str, ...] = AGENT_FEATURES,
                   usage_interval_s: float = 0.0, sent_at: float = 0.0) -> agent_pb2.AgentMessage:
    return agent_pb2.AgentMessage(register=agent_pb2.Register(
        sent_at=sent_at, node=node, capacity=resources_to_pb(capacity), reserved=resources_to_pb(reserved), labels=labels,
        features=features, usage_interval_s=usage_interval_s,
        runtime=runtime, agent_version=version, pids_max=ceilings.pids_max, log_max_bytes=ceilings.log_max_bytes,
        running=[
            agent_pb2.RunningTask(task_id=r.task_id, attempt=r.attempt, resources=resources_to_pb(r.resources))
            for r in running
        ],
        pending_events=[event_to_pb(seq, r) for seq, r in pending],
    ))


def heartbeat_to_pb(free: Resources, usage: dict[str, tuple[int, TaskUsage]], now: float,
                    class_mix: dict[int, int] | None = None,
                    gpus: tuple[GpuSample, ...] = ()) -> agent_pb2.AgentMessage:
    return agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat(
        free=resources_to_pb(free), sent_at=now,
        usage=[usage_to_pb(u, task_id, attempt) for task_id, (attempt, u) in usage.items()],
        class_mix=class_mix or {}, gpus=[gpu_usage_to_pb(g) for g in gpus],
    ))


def events_to_pb(batch: list[tuple[int, TaskReport]]) -> agent_pb2.AgentMessage:
    return agent_pb2.AgentMessage(events=agent_pb2.TaskEvents(events=[event_to_pb(s, r) for s, r in batch]))


def log_data_to_pb(request_id: str, data: bytes = b"", eof: bool = False, error: str = "") -> agent_pb2.AgentMessage:
    return agent_pb2.AgentMessage(log_data=agent_pb2.LogData(request_id=request_id, data=data, eof=eof, error=error))

