"""A fake Local Manager for GM component tests and bench/gm_place.py: LocalManagerService
over gRPC wrapping the pure tcluster.federation.lm.LocalManager (no master, no agents). It
counts launches per task so a test can assert that nothing ran twice."""

from __future__ import annotations

import asyncio
from collections import Counter

import grpc

from tcluster.federation.lm import LocalManager
from tcluster.federation.messages import TaskLaunched, LMNode
from tcluster.federation.view import split
from tcluster.master.edge.federation_api import answer_pb, request_from_pb, res_pb, state_pb
from tcluster.wire.channels import SERVER_GRPC_OPTIONS
from tcluster.daemonkit.timeouts import wait_for
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2, jobs_pb2_grpc


class FakeLM(federation_pb2_grpc.LocalManagerServiceServicer):
    def __init__(self, lm: int, nodes: list[tuple[int, int]], gms: int = 2, interval_s: float = 0.2,
                 labels: dict[int, str] | None = None) -> None:
        self.lm, self.gms, self.interval_s = lm, gms, interval_s
        self.words = sorted(set((labels or {}).values()))
        specs = tuple(LMNode(cap, 1 << self.words.index(labels[i]) if labels and i in labels else 0)
                      for i, cap in enumerate(nodes))
        self.pure = LocalManager(split(lm, specs, gms), epoch=1)
        self.launches: Counter[str] = Counter()
        self.places: Counter[str] = Counter()     # Place requests per task, whatever the answer
        self.subs: list[tuple[int, asyncio.Queue]] = []
        self.silent = False          # stop sending periodic states (a partitioned LM)
        self.cancels: Counter[str] = Counter()   # JobService.Cancel calls per LM job
        self.cancel_down = False     # JobService.Cancel answers UNAVAILABLE
        self.gate: asyncio.Event | None = None   # set: Place waits for it (a slow LM), counted in held
        self.held = 0
        self.place_delay_s = 0.0     # each Place takes this long first (a master's durable write)
        self.end_before_answer_s: float | None = None   # a launched task ends, on the stream, this
                                                        # long before its Place is answered
        self.server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = grpc.aio.server(options=list(SERVER_GRPC_OPTIONS))
        federation_pb2_grpc.add_LocalManagerServiceServicer_to_server(self, self.server)
        jobs_pb2_grpc.add_JobServiceServicer_to_server(FakeJobs(self), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop(0)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def layout_pb(self) -> fpb.LMLayout:
        lay = self.pure.layout
        nodes = [fpb.FedNode(name=f"lm{self.lm}-n{i}", cap=res_pb(n.cap), cmask=n.cmask, owner=lay.owner[i])
                 for i, n in enumerate(lay.nodes)]
        return fpb.LMLayout(lm=self.lm, gms=self.gms, nodes=nodes, constraints=self.words,
                            epoch=self.pure.epoch, name=f"lm{self.lm}")

    def new_epoch(self) -> None:
        """A failover: requests with the old epoch are refused; subscribers get the new layout."""
        self.pure.fail_over()
        for _, q in self.subs:
            q.put_nowait(fpb.LMUpdate(layout=self.layout_pb()))
            q.put_nowait(fpb.LMUpdate(state=state_pb(self.pure.state())))

    def end(self, task_id: str, state: common_pb2.TaskState = common_pb2.TASK_SUCCEEDED) -> None:
        gm, delta = self.pure.end(task_id)
        msg = fpb.FedTaskEnded(lm=delta.lm, epoch=delta.epoch, version=delta.version, task_id=delta.task_id,
                               node=delta.node, node_free=res_pb(delta.node_free), state=state)
        for g, q in self.subs:
            if g == gm:
                q.put_nowait(fpb.LMUpdate(ended=msg))

    async def Subscribe(self, request, context):
        q: asyncio.Queue = asyncio.Queue()
        entry = (request.gm, q)
        self.subs.append(entry)
        try:
            yield fpb.LMUpdate(layout=self.layout_pb())
            yield fpb.LMUpdate(state=state_pb(self.pure.state()))
            while True:
                try:
                    yield await wait_for(q.get(), self.interval_s)
                except TimeoutError:
                    if not self.silent:
                        yield fpb.LMUpdate(state=state_pb(self.pure.state()))
        finally:
            self.subs.remove(entry)

    async def Place(self, request, context):
        if self.gate is not None:
            self.held += 1
            await self.gate.wait()
        if self.place_delay_s:
            await asyncio.sleep(self.place_delay_s)
        req = request_from_pb(request)
        self.places[req.task.task_id] += 1
        repeat = req.request_id in self.pure.answers
        answer, _ = self.pure.handle(req)
        if isinstance(answer, TaskLaunched) and not repeat:
            self.launches[req.task.task_id] += 1
            if self.end_before_answer_s is not None:
                self.end(req.task.task_id)
                await asyncio.sleep(self.end_before_answer_s)
        return answer_pb(answer, f"j-{req.task.task_id}" if isinstance(answer, TaskLaunched) else "")


class FakeJobs(jobs_pb2_grpc.JobServiceServicer):
    """The LM master's JobService as a GM uses it: Cancel of the one-task job j-<task id>
    kills the task (its end goes to its GM as TASK_KILLED)."""

    def __init__(self, lm: FakeLM) -> None:
        self.lm = lm

    async def Cancel(self, request, context):
        if self.lm.cancel_down:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "fake: cancel down")
        self.lm.cancels[request.id] += 1
        task_id = request.id.removeprefix("j-")
        if task_id in self.lm.pure.running:
            self.lm.end(task_id, common_pb2.TASK_KILLED)
        return jobs_pb2.Job(id=request.id, state=jobs_pb2.JOB_CANCELLED)

    async def Get(self, request, context):
        """A job it cancelled, as the master answers it (the GM's reconciliation reads it)."""
        if self.lm.cancels[request.id]:
            return jobs_pb2.Job(id=request.id, state=jobs_pb2.JOB_CANCELLED,
                                tasks=[jobs_pb2.Task(state=common_pb2.TASK_KILLED, reason="cancelled")])
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "fake: Get of cancelled jobs only")
