"""pb <-> domain for the agent stream, master side. Raises ValueError on malformed input."""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import attrgetter

from tcluster.domain.ceilings import Ceilings
from tcluster.domain.bounds import MAX_EVENTS_PER_MESSAGE, MAX_REASON_BYTES, MAX_USAGE_PER_HEARTBEAT
from tcluster.master.core.actions import (
    AckReports, BinTarget, FetchLog, Heartbeat, Kill, LaunchBatch, LogCredit, LogPiece, Registration, ReportBatch, WatchUsage,
)
from tcluster.wire.features import MAX_FEATURES
from tcluster.master.core.execio import ExecPiece, FeedExec, StartExec
from tcluster.master.core.events import Outbound, Welcome
from tcluster.v1 import agent_pb2, common_pb2
from tcluster.master.core.usageblock import UsageBlock, figures
from tcluster.domain.launch import Launch
from tcluster.domain.model import TaskState
from tcluster.domain.reports import TaskReport
from tcluster.domain.gpuusage import MAX_PER_HEARTBEAT as MAX_GPU_SAMPLES
from tcluster.wire.protobuf import (
    gpu_usage_from_pb, launch_to_pb, resources_from_pb, spec_to_pb, task_state_from_pb, usage_from_pb,
)

Inbound = Registration | Heartbeat | ReportBatch | LogPiece | ExecPiece
MAX_CLASSES = 256      # LoTES classes in a heartbeat's class mix
MAX_GPUS_PER_TASK = 64   # GPU indices kept of one report's binding
# A LaunchTasks message is cut at about this many bytes (a spec may be up to 1 MiB; the
# stream takes messages up to channels.MAX_MESSAGE_BYTES).
BATCH_BYTES = 1 * 2**20
MAX_USAGE_INTERVAL_S = 3600.0


_ID, _ATTEMPT = attrgetter("task_id"), attrgetter("attempt")


def _inactive_unset(msg: common_pb2.TaskUsage) -> bool:
    return not msg.HasField("memory_inactive_file_bytes")


def usage_block_from_pb(samples: Sequence[common_pb2.TaskUsage]) -> UsageBlock:
    """A heartbeat's samples kept as messages; each reads as `usage_from_pb` of it, when
    read, with the history's figures as an array. Hot: one attrgetter call per sample for
    each of ids, attempts and the figures, nothing per field in Python. Samples without a
    task id are dropped; a task sent twice keeps its last sample (at its first place)."""
    ids, attempts = tuple(map(_ID, samples)), tuple(map(_ATTEMPT, samples))
    block = UsageBlock(ids, attempts, samples, figures(samples, _inactive_unset), usage_from_pb, _inactive_unset)
    if "" in ids or len(set(ids)) != len(ids):
        last = dict(zip(ids, range(len(ids))))
        return block.take([row for task_id, row in last.items() if task_id])
    return block


def report_from_pb(event: agent_pb2.TaskEvent) -> TaskReport:
    if not event.task_id or len(event.task_id) > 64:
        raise ValueError(f"task event with a bad task_id ({len(event.task_id)} chars)")
    if not math.isfinite(event.at):
        raise ValueError(f"task event {event.task_id}: time {event.at!r} is not finite")
    state = task_state_from_pb(event.state)
    if state in (TaskState.PENDING, TaskState.STARTING) and not event.rejected:
        raise ValueError(f"task event {event.task_id}: an agent cannot report {state.value}")
    return TaskReport(
        task_id=event.task_id, attempt=event.attempt, state=state,
        exit_code=event.exit_code if event.has_exit_code else None, signal=event.signal,
        reason=event.reason[:MAX_REASON_BYTES], at=event.at,
        usage=usage_from_pb(event.usage) if event.HasField("usage") else None, rejected=event.rejected,
        gpus=tuple(event.gpus[:MAX_GPUS_PER_TASK]),
    )


def registration_from_pb(msg: agent_pb2.Register) -> Registration:
    if len(msg.pending_events) > MAX_EVENTS_PER_MESSAGE:
        raise ValueError(f"register carries {len(msg.pending_events)} events; at most {MAX_EVENTS_PER_MESSAGE}")
    reports = tuple(report_from_pb(e) for e in msg.pending_events)
    return Registration(
        node=msg.node, capacity=resources_from_pb(msg.capacity), reserved=resources_from_pb(msg.reserved),
        labels=tuple(sorted(msg.labels.items())), runtime=msg.runtime,
        running=tuple((t.task_id, t.attempt) for t in msg.running), reports=reports,
        last_seq=max((e.seq for e in msg.pending_events), default=0),
        ceilings=Ceilings(pids_max=msg.pids_max, log_max_bytes=msg.log_max_bytes),   # 0 from an older agent
        features=features_from_pb(msg.features),
        usage_interval_s=usage_interval_from_pb(msg.usage_interval_s),
    )


def features_from_pb(names: Sequence[str]) -> frozenset[str]:
    if len(names) > MAX_FEATURES:
        raise ValueError(f"register.features: {len(names)} names; at most {MAX_FEATURES}")
    if any(len(n) > 63 for n in names):
        raise ValueError("register.features: a name longer than 63 characters")
    return frozenset(names)      # names this master does not know are ignored (a newer agent)


def usage_interval_from_pb(value: float) -> float:
    if not math.isfinite(value) or not 0 <= value <= MAX_USAGE_INTERVAL_S:
        raise ValueError(f"register.usage_interval_s: {value!r}; allowed: 0 (the master chooses) "
                         f"to {MAX_USAGE_INTERVAL_S:g} seconds")
    return value


def inbound_from_pb(msg: agent_pb2.AgentMessage) -> Inbound:
    kind = msg.WhichOneof("kind")
    if kind == "register":
        return registration_from_pb(msg.register)
    if kind == "heartbeat":
        if len(msg.heartbeat.usage) > MAX_USAGE_PER_HEARTBEAT:
            raise ValueError(f"heartbeat carries {len(msg.heartbeat.usage)} usage samples")
        usage = usage_block_from_pb(msg.heartbeat.usage)   # columns; TaskUsage only when read
        if len(msg.heartbeat.class_mix) > MAX_CLASSES:
            raise ValueError(f"heartbeat carries {len(msg.heartbeat.class_mix)} classes; at most {MAX_CLASSES}")
        mix = {int(k): int(n) for k, n in msg.heartbeat.class_mix.items() if k >= 0 and n > 0}
        if len(msg.heartbeat.gpus) > MAX_GPU_SAMPLES:
            raise ValueError(f"heartbeat carries {len(msg.heartbeat.gpus)} GPU samples; at most {MAX_GPU_SAMPLES}")
        gpus = tuple(gpu_usage_from_pb(g) for g in msg.heartbeat.gpus if len(g.task_id) <= 64)
        return Heartbeat(free=resources_from_pb(msg.heartbeat.free), usage=usage, class_mix=mix, gpus=gpus)
    if kind == "events":
        events = msg.events.events
        if len(events) > MAX_EVENTS_PER_MESSAGE:
            raise ValueError(f"{len(events)} events in one message; at most {MAX_EVENTS_PER_MESSAGE}")
        return ReportBatch(tuple(report_from_pb(e) for e in events), max((e.seq for e in events), default=0))
    if kind == "log_data":
        d = msg.log_data
        return LogPiece(d.request_id, d.data, d.eof, d.error)
    if kind == "exec_data":
        e = msg.exec_data
        return ExecPiece(e.exec_id, e.stdout, e.stderr, e.started, e.exited,
                         e.exit_code if e.has_exit_code else None, e.signal, e.error[:MAX_REASON_BYTES],
                         max(0, e.stdin_credit))
    raise ValueError(f"agent message without a known kind ({kind!r})")


def outbound_to_pbs(message: Outbound) -> list[agent_pb2.MasterMessage]:
    """A batch of launches goes as few LaunchTasks as its size allows (each spec encoded
    once per message); everything else as one message."""
    if not isinstance(message, LaunchBatch):
        return [outbound_to_pb(message)]
    out: list[agent_pb2.MasterMessage] = []
    current = agent_pb2.LaunchTasks()
    specs: dict[int, object] = {}
    size = 0
    for launch in message.launches:
        assert launch.spec is not None, "a launch sent to an agent carries its spec"
        spec = specs.get(id(launch.spec))
        if spec is None:
            spec = specs[id(launch.spec)] = spec_to_pb(launch.spec)
        item = current.launches.add(task_id=launch.task_id, attempt=launch.attempt, job_id=launch.job_id,
                                    index=launch.index, preemptions=launch.preemptions)
        item.spec.CopyFrom(spec)
        if launch.lotes_class is not None:
            item.lotes_class = launch.lotes_class
        size += item.ByteSize()
        if size >= BATCH_BYTES:
            out.append(agent_pb2.MasterMessage(launches=current))
            current, specs, size = agent_pb2.LaunchTasks(), {}, 0
    if current.launches:
        out.append(agent_pb2.MasterMessage(launches=current))
    return out


def outbound_to_pb(message: Outbound) -> agent_pb2.MasterMessage:
    if isinstance(message, Launch):
        return agent_pb2.MasterMessage(launch=launch_to_pb(message))
    if isinstance(message, Kill):
        return agent_pb2.MasterMessage(kill=agent_pb2.KillTask(
            task_id=message.task_id, attempt=message.attempt, reason=message.reason, grace_s=message.grace_s))
    if isinstance(message, Welcome):
        registered = agent_pb2.Registered(
            heartbeat_interval_s=message.heartbeat_interval_s, fence_after_s=message.fence_after_s,
            usage_interval_s=message.usage_interval_s, cluster_nodes=message.cluster_nodes,
            kills=[agent_pb2.KillTask(task_id=k.task_id, attempt=k.attempt, reason=k.reason, grace_s=k.grace_s)
                   for k in message.kills])
        if isinstance(message.bin_target, BinTarget):
            registered.bin_target.CopyFrom(bin_target_to_pb(message.bin_target))
        return agent_pb2.MasterMessage(registered=registered)
    if isinstance(message, BinTarget):
        return agent_pb2.MasterMessage(bin_target=bin_target_to_pb(message))
    if isinstance(message, AckReports):
        return agent_pb2.MasterMessage(ack=agent_pb2.Ack(seq=message.seq, usage_interval_s=message.usage_interval_s))
    if isinstance(message, FetchLog):
        return agent_pb2.MasterMessage(log_request=agent_pb2.LogRequest(
            request_id=message.request_id, task_id=message.task_id, stderr=message.stderr,
            tail_bytes=message.tail_bytes, max_bytes=message.max_bytes, follow=message.follow,
            window=message.window, attempt=message.attempt))
    if isinstance(message, LogCredit):
        return agent_pb2.MasterMessage(log_credit=agent_pb2.LogCredit(
            request_id=message.request_id, chunks=message.chunks, cancel=message.cancel))
    if isinstance(message, StartExec):
        return agent_pb2.MasterMessage(exec_start=agent_pb2.ExecStart(
            exec_id=message.exec_id, task_id=message.task_id, attempt=message.attempt, command=message.command,
            tty=message.tty, rows=message.rows, cols=message.cols, window=message.window, term=message.term))
    if isinstance(message, FeedExec):
        return agent_pb2.MasterMessage(exec_feed=agent_pb2.ExecFeed(
            exec_id=message.exec_id, stdin=message.stdin, stdin_eof=message.stdin_eof, rows=message.rows,
            cols=message.cols, credit=message.credit, cancel=message.cancel))
    if isinstance(message, WatchUsage):
        return agent_pb2.MasterMessage(usage_watch=agent_pb2.UsageWatch(interval_s=message.interval_s,
                                                                        for_s=message.for_s))
    raise TypeError(f"cannot send {type(message).__name__}")


def bin_target_to_pb(target: BinTarget) -> agent_pb2.BinTarget:
    return agent_pb2.BinTarget(config=target.config, counts=target.counts, classes=target.classes,
                               fallback=target.fallback)
