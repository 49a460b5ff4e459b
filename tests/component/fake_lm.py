"""A fake Local Manager for GM component tests: LocalManagerService over gRPC wrapping the
pure tcluster.federation.lm.LocalManager (no master, no agents). It counts launches per
task so a test can assert that nothing ran twice."""

from __future__ import annotations

import asyncio
from collections import Counter

import grpc

from tcluster.federation.lm import LocalManager
from tcluster.federation.messages import Launched, NodeSpec
from tcluster.federation.view import split
from tcluster.master.edge.federation_api import answer_pb, request_from_pb, res_pb, state_pb
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc


class FakeLM(federation_pb2_grpc.LocalManagerServiceServicer):
    def __init__(self, lm: int, nodes: list[tuple[int, int]], gms: int = 2, interval_s: float = 0.2,
                 labels: dict[int, str] | None = None) -> None:
        self.lm, self.gms, self.interval_s = lm, gms, interval_s
        self.words = sorted(set((labels or {}).values()))
        specs = tuple(NodeSpec(cap, 1 << self.words.index(labels[i]) if labels and i in labels else 0)
                      for i, cap in enumerate(nodes))
        self.pure = LocalManager(split(lm, specs, gms), epoch=1)
        self.launches: Counter[str] = Counter()
        self.subs: list[tuple[int, asyncio.Queue]] = []
        self.silent = False          # stop sending periodic states (a partitioned LM)
        self.server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = grpc.aio.server()
        federation_pb2_grpc.add_LocalManagerServiceServicer_to_server(self, self.server)
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

    def end(self, task_id: str) -> None:
        gm, delta = self.pure.end(task_id)
        msg = fpb.FedTaskEnded(lm=delta.lm, epoch=delta.epoch, version=delta.version, task_id=delta.task_id,
                               node=delta.node, node_free=res_pb(delta.node_free), state=common_pb2.TASK_SUCCEEDED)
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
                    yield await asyncio.wait_for(q.get(), self.interval_s)
                except TimeoutError:
                    if not self.silent:
                        yield fpb.LMUpdate(state=state_pb(self.pure.state()))
        finally:
            self.subs.remove(entry)

    async def Place(self, request, context):
        req = request_from_pb(request)
        repeat = req.request_id in self.pure.answers
        answer, _ = self.pure.handle(req)
        if isinstance(answer, Launched) and not repeat:
            self.launches[req.task.task_id] += 1
        return answer_pb(answer, f"j-{req.task.task_id}" if isinstance(answer, Launched) else "")
