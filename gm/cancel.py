"""Cancelling a federated job (GlobalManagerService.Cancel).

The intent is a row of the GM's store, written before Cancel answers, and kept until every
task of the job has ended: tasks still pending at the GM end CANCELLED at once; a placed
task is cancelled through its LM master's JobService.Cancel (the master keeps that intent
itself) and ends CANCELLED when the LM reports it ended, as any task end is heard (the
stream's delta, else the reconciliation's lookup). A task being placed is left alone until
the LM answers: launched, it is cancelled at the LM; refused, it is pending and ends here.
After a restart every LM cancel of a job still cancelling is sent again (the master's
Cancel is idempotent)."""

from __future__ import annotations

import asyncio
import logging

import grpc

from tcluster.gm.port import GMPort
from tcluster.gm.store import TERMINAL
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc
from tcluster.daemonkit.timeouts import wait_for

log = logging.getLogger("tcluster.gm")
SWEEP_S = 1.0          # how often jobs still cancelling are looked at (and failed LM cancels retried)
REASON = "cancelled at the GM"
# The LM's answers that mean its job will not run on: cancelled now, or over already.
_DONE = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION)


class Canceller:
    def __init__(self, port: GMPort) -> None:
        self.port = port
        self.wake = asyncio.Event()
        self.sent: set[str] = set()        # LM jobs whose master accepted the cancel (this process)
        self.jobs: set[str] = set()        # jobs being cancelled (the store's intents, in memory)

    def request(self, job_id: str) -> None:
        """Persist the intent and end the pending tasks, before the caller answers."""
        self.port.store.cancel(job_id)
        self.jobs.add(job_id)
        self.end_pending(job_id)
        self.wake.set()

    def recover(self) -> None:
        """After _recover: pending tasks of jobs being cancelled must not be placed."""
        for job_id in self.port.store.cancelling():
            self.jobs.add(job_id)
            self.end_pending(job_id)

    def drop(self, task_id: str) -> bool:
        """About to be placed: True (and the task ended) when its job is being cancelled. A task
        refused by an LM, or preempted, goes back to its queue before a sweep sees it."""
        job_id = task_id.rpartition(".")[0]
        if job_id not in self.jobs:
            return False
        if self.port.store.tasks("task_id=? AND state='PENDING'", (task_id,)):
            self.port.store.ended(task_id, "CANCELLED", 0, REASON)
        return True

    def end_pending(self, job_id: str) -> None:
        rows = self.port.store.tasks("job_id=? AND state='PENDING'", (job_id,))
        if not rows:
            return
        ids = {r.task_id for r in rows}
        for q in self.port.gm.queues.values():
            kept = [p for p in q.items if p.task.task_id not in ids]
            if len(kept) != len(q.items):
                q.items.clear()
                q.items.extend(kept)
        self.port.gm.stamp += 1         # queues' "tried at this stamp" counts are stale now
        self.port.store.ended_many([r.task_id for r in rows], "CANCELLED", REASON)    # one commit

    async def run(self) -> None:
        while True:
            for job_id in self.port.store.cancelling():
                await self.sweep(job_id)
            self.wake.clear()
            try:
                await wait_for(self.wake.wait(), SWEEP_S)
            except TimeoutError:
                pass

    async def sweep(self, job_id: str) -> None:
        self.end_pending(job_id)
        rows = self.port.store.tasks("job_id=?", (job_id,))
        if all(r.state in TERMINAL for r in rows):
            self.port.store.cancelled(job_id)
            self.jobs.discard(job_id)
            self.sent.difference_update(r.lm_job for r in rows if r.lm_job)   # held only while cancelling
            return
        for r in rows:
            if r.state == "RUNNING" and r.lm_job and r.lm_job not in self.sent and r.lm is not None:
                if await self.cancel_at_lm(r.lm, r.lm_job):
                    self.sent.add(r.lm_job)

    async def cancel_at_lm(self, lm: int, lm_job: str) -> bool:
        """True once the LM's master took the cancel (or the job is over there already).
        An LM without a live stream is left for a later sweep: a call would only wait out
        its deadline, per task and per sweep, with other jobs' cancels behind it."""
        link = self.port.links[lm]
        if not link.connected:
            return False
        tour = link.tour()
        for addr in tour:
            stub = jobs_pb2_grpc.JobServiceStub(self.port.channel(addr))
            try:
                await stub.Cancel(jobs_pb2.CancelJobRequest(id=lm_job), metadata=self.port.metadata(), timeout=10)
                return True
            except grpc.aio.AioRpcError as e:
                if e.code() in _DONE:
                    return True
                log.info("cancel of LM %s job %s at %s: %s", link.name, lm_job, addr, e.code().name)
                link.follow(tour, e)
        return False
