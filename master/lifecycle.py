"""The master's side of the lifecycle verbs (README, "Hold, release, requeue, wait"):
who may ask (the job's owner or an admin, as for cancel), and for `tcl update` of a
pending job, the new spec checked as a submit's (fields, queue, grants, the queue's
weight and time limit caps, its pending-task cap). What each verb does to the rows is
the core's (master/core/lifecycle.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from tcluster.domain.arrays import parse_index_set
from tcluster.domain.errors import PermissionDenied
from tcluster.domain.model import Job, JobSpec, Task
from tcluster.master.core.events import HoldJob, RequeueTasks, UpdateJob
from tcluster.master.features.quotas_live import check_pending_cap
from tcluster.master.queues import with_queue_time_limit
from tcluster.master.service import MasterService
from tcluster.security.authz import Caller, SubmitJob
from tcluster.wire.codec import check_spec


@dataclass(frozen=True)
class SpecChanges:
    """What `tcl update` may change of a pending job; None: unchanged."""
    cpu: float | None = None
    memory: int | None = None
    time_limit_s: float | None = None
    queue: str | None = None
    weight: float | None = None

    @property
    def empty(self) -> bool:
        return all(v is None for v in (self.cpu, self.memory, self.time_limit_s, self.queue, self.weight))


async def hold(service: MasterService, job_id: str, caller: Caller, held: bool) -> tuple[Job, list[Task]]:
    def event_of(job: Job) -> HoldJob:
        # As Slurm's: what an admin held, only an admin releases (a user may hold only their own jobs).
        if not held and job.held_by and job.held_by != caller.name and not caller.admin:
            raise PermissionDenied(f"job {job.id} was held by {job.held_by}, an admin: only an admin may release it")
        return HoldJob(job.id, caller.name, held)
    return await service.act(job_id, caller, event_of)


async def requeue(service: MasterService, job_id: str, caller: Caller, tasks: str) -> tuple[Job, list[Task]]:
    indexes = parse_index_set(tasks) if tasks else None
    return await service.act(job_id, caller, lambda job: RequeueTasks(job.id, indexes, caller.name))


async def update(service: MasterService, job_id: str, caller: Caller, throttle: int | None,
                 changes: SpecChanges) -> tuple[Job, list[Task]]:
    def event_of(job: Job) -> UpdateJob:
        return UpdateJob(job.id, throttle, None if changes.empty else checked_spec(service, job, caller, changes))
    return await service.act(job_id, caller, event_of)


def checked_spec(service: MasterService, job: Job, caller: Caller, changes: SpecChanges) -> JobSpec:
    """The job's spec with the changes, through the checks a submit of it would pass."""
    spec = job.spec
    resources = spec.resources
    if changes.cpu is not None:
        resources = replace(resources, cpu=changes.cpu)
    if changes.memory is not None:
        resources = replace(resources, memory=changes.memory)
    spec = replace(spec, resources=resources)
    if changes.time_limit_s is not None:
        spec = replace(spec, time_limit_s=changes.time_limit_s)
    if changes.weight is not None:
        spec = replace(spec, weight=changes.weight)
    if changes.queue is not None:
        spec = replace(spec, queue=changes.queue)
    check_spec(spec)
    service.queues.check_leaf(spec.queue)
    spec = with_queue_time_limit(spec, service.queues.max_time_limit_s(spec.queue))
    service.gate.check(caller, SubmitJob(spec.queue, "", spec.weight, service.queues.max_job_weight(spec.queue)))
    if spec.queue != job.spec.queue:       # its waiting tasks move: the new queue's cap counts them
        check_pending_cap(service.state, service.queues, spec)
    return spec
