"""tcl-gm against fake LMs (testkit/fake_lm.py): 2 LMs x 2 GMs, forwarding, a GM
restart mid-burst (nothing lost, nothing launched twice), an LM whose view ages out, and
a stale epoch."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from testkit.fake_lm import FakeLM
from tests.component.harness import wait_until
from testkit.proxy import TcpProxy
from tcluster.gm.daemon import GMDaemon
from tcluster.gm.settings import settings_from
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2

NODE = (4000, 8192)       # 4 cores, 8 GiB


def spec(queue: str, tasks: int, cpu: float = 1.0, constraints: tuple[str, ...] = ()) -> jobs_pb2.JobSpec:
    return jobs_pb2.JobSpec(queue=queue, tasks=tasks, command=["true"], constraints=list(constraints),
                            resources=common_pb2.Resources(cpu=cpu, memory=512 << 20))


class Fed:
    """2 fake LMs x 2 GMs on loopback; GM ports are fixed once chosen so a restart keeps them."""

    def __init__(self, tmp: Path, nodes: int = 4, max_age_s: float = 30.0) -> None:
        self.tmp, self.nodes, self.max_age_s = tmp, nodes, max_age_s
        self.lms: list[FakeLM] = []
        self.gms: list[GMDaemon | None] = [None, None]
        self.ports = [0, 0]

    async def start(self) -> None:
        self.lms = [FakeLM(i, [NODE] * self.nodes) for i in range(2)]
        for lm in self.lms:
            await lm.start()
        for i in range(2):
            await self.start_gm(i)

    def settings(self, i: int):
        import socket
        for k in range(2):
            if not self.ports[k]:
                s = socket.socket()
                s.bind(("127.0.0.1", 0))
                self.ports[k] = s.getsockname()[1]
                s.close()
        return settings_from(dict(
            name=f"gm{i}", index=i, listen=f"127.0.0.1:{self.ports[i]}", state_dir=str(self.tmp / f"gm{i}"),
            lms=",".join(f"lm{k}={lm.address}" for k, lm in enumerate(self.lms)),
            gms=",".join(f"gm{k}=127.0.0.1:{p}" for k, p in enumerate(self.ports)),
            queue_map="a=gm0,b=gm1", view_max_age_s=self.max_age_s))

    async def start_gm(self, i: int) -> GMDaemon:
        d = GMDaemon(self.settings(i))
        await d.start()
        self.gms[i] = d
        return d

    async def stop(self) -> None:
        for d in self.gms:
            if d is not None:
                await d.stop()
        for lm in self.lms:
            await lm.stop()

    def stub(self, i: int) -> federation_pb2_grpc.GlobalManagerServiceStub:
        return federation_pb2_grpc.GlobalManagerServiceStub(self.gms[i].channel(f"127.0.0.1:{self.ports[i]}"))

    def launches(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for lm in self.lms:
            for t, n in lm.launches.items():
                out[t] = out.get(t, 0) + n
        return out


def scenario(tmp: Path, body, **kw) -> None:
    async def main() -> None:
        fed = Fed(tmp, **kw)
        await fed.start()
        try:
            await body(fed)
        finally:
            await fed.stop()
    asyncio.run(main())


async def job_of(fed: Fed, gm: int, job_id: str) -> fpb.FedJob:
    return await fed.stub(gm).Get(fpb.FedGetRequest(id=job_id))


def test_two_queues_run_on_both_lms_and_end(tmp_path: Path) -> None:
    async def body(fed: Fed) -> None:
        a = await fed.stub(0).Submit(fpb.FedSubmitRequest(spec=spec("a", 6)))
        b = await fed.stub(0).Submit(fpb.FedSubmitRequest(spec=spec("b", 6)))     # forwarded to gm1
        assert a.id.startswith("f0-") and b.id.startswith("f1-") and b.gm == "gm1"

        async def all_running() -> bool:
            jobs = [await job_of(fed, 0, a.id), await job_of(fed, 0, b.id)]
            return all(t.state == "RUNNING" for j in jobs for t in j.tasks)
        await wait_until(all_running)
        used = {t.lm for t in (await job_of(fed, 1, a.id)).tasks} | {t.lm for t in (await job_of(fed, 1, b.id)).tasks}
        assert used == {"lm0", "lm1"}
        assert all(n == 1 for n in fed.launches().values()) and len(fed.launches()) == 12
        for lm in fed.lms:
            for t in list(lm.pure.running):
                lm.end(t)

        async def all_done() -> bool:
            jobs = [await job_of(fed, 0, j) for j in (a.id, b.id)]
            return all(j.state == "SUCCEEDED" for j in jobs)
        await wait_until(all_done)
        listed = await fed.stub(1).List(fpb.FedListRequest())
        assert [j.id for j in listed.jobs] == [b.id]
    scenario(tmp_path, body)


def test_unknown_queue_and_bad_constraint_are_clear_errors(tmp_path: Path) -> None:
    async def body(fed: Fed) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await fed.stub(0).Submit(fpb.FedSubmitRequest(spec=spec("zz", 1)))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "'zz'" in e.value.details()
        assert "a, b" in e.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await fed.stub(0).Submit(fpb.FedSubmitRequest(spec=spec("a", 1, constraints=("disk!=hdd",))))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "spec.constraints" in e.value.details()
    scenario(tmp_path, body)


def test_gm_restart_mid_burst_places_each_task_exactly_once(tmp_path: Path) -> None:
    async def body(fed: Fed) -> None:
        ids = []
        for _ in range(10):
            ids.append((await fed.stub(0).Submit(fpb.FedSubmitRequest(spec=spec("a", 2, cpu=0.5)))).id)
        await wait_until(lambda: asyncio.sleep(0, result=sum(fed.launches().values()) >= 3))
        await fed.gms[0].stop()                      # mid-burst: some placed, some pending, maybe one in flight
        fed.gms[0] = None
        await fed.start_gm(0)

        async def all_running() -> bool:
            jobs = [await job_of(fed, 0, j) for j in ids]
            return all(t.state == "RUNNING" for j in jobs for t in j.tasks)
        await wait_until(all_running)
        launches = fed.launches()
        assert len(launches) == 20 and set(launches.values()) == {1}
    scenario(tmp_path, body)


def test_unanswered_request_is_resent_with_the_same_id_after_restart(tmp_path: Path) -> None:
    async def body(fed: Fed) -> None:
        d = fed.gms[0]
        job = await fed.stub(0).Submit(fpb.FedSubmitRequest(spec=spec("a", 1)))
        await wait_until(lambda: asyncio.sleep(0, result=sum(fed.launches().values()) == 1))
        # As if the GM died after the LM launched but before the answer was recorded.
        row = d.store.tasks("job_id=?", (job.id,))[0]
        [lm] = [lm for lm in fed.lms if lm.launches]
        first = [rid for rid in lm.pure.answers][0]
        req = fpb.PlaceRequest(request_id=first, gm=0, epoch=lm.pure.epoch, node=row.node,
                               task=fpb.FedTask(task_id=row.task_id, queue="a", req=fpb.Res(v=[1000, 512])))
        req.launch.SetInParent()
        d.store.placing(row.task_id, row.attempt, row.lm, row.node, req.SerializeToString())
        await d.stop()
        fed.gms[0] = None
        await fed.start_gm(0)
        await wait_until(lambda: job_of(fed, 0, job.id))
        got = await job_of(fed, 0, job.id)
        await wait_until(lambda: asyncio.sleep(0, result=fed.gms[0].store.tasks("1")[0].state == "RUNNING"))
        assert fed.launches() == {row.task_id: 1} and got.tasks[0].lm == f"lm{fed.lms.index(lm)}"
    scenario(tmp_path, body)


def test_silent_lm_ages_out_and_gets_no_more_places(tmp_path: Path) -> None:
    async def body(fed: Fed) -> None:
        await wait_until(lambda: asyncio.sleep(0, result=all(l.usable for l in fed.gms[0].links)))
        fed.lms[1].silent = True
        await wait_until(lambda: asyncio.sleep(0, result=not fed.gms[0].links[1].usable), timeout_s=10)
        before = sum(fed.lms[1].launches.values())
        job = await fed.stub(0).Submit(fpb.FedSubmitRequest(spec=spec("a", 4)))
        await wait_until(lambda: asyncio.sleep(0, result=all(
            r.state == "RUNNING" for r in fed.gms[0].store.tasks("job_id=?", (job.id,)))))
        assert sum(fed.lms[1].launches.values()) == before
        status = await fed.stub(0).Status(fpb.FedStatusRequest())
        assert status.lms[1].view_age_s > 1.0 and status.lms[0].partition_nodes == [2, 2]
    scenario(tmp_path, body, max_age_s=1.0)


def test_stale_epoch_adopts_the_new_layout_and_retries(tmp_path: Path) -> None:
    async def body(fed: Fed) -> None:
        await wait_until(lambda: asyncio.sleep(0, result=all(l.usable for l in fed.gms[0].links)))
        for lm in fed.lms:
            lm.new_epoch()
        job = await fed.stub(0).Submit(fpb.FedSubmitRequest(spec=spec("a", 4)))
        await wait_until(lambda: asyncio.sleep(0, result=all(
            r.state == "RUNNING" for r in fed.gms[0].store.tasks("job_id=?", (job.id,)))))
        assert set(fed.launches().values()) == {1} and all(l.layout.epoch == 2 for l in fed.gms[0].links)
    scenario(tmp_path, body)


def test_a_silent_lm_address_is_left_for_the_lms_next_one(tmp_path: Path) -> None:
    # An LM master whose host died or was cut off sends no FIN or RST: the GM's Subscribe
    # stream (nothing flows from the GM) used to stay open forever on it. Keepalive pings end
    # it, and the GM subscribes at the LM's next address, as to an HA standby that took over.
    async def main() -> None:
        lms = [FakeLM(i, [NODE] * 2, gms=1) for i in range(2)]
        for lm in lms:
            await lm.start()
        proxy = TcpProxy(("127.0.0.1", lms[0].port))
        gm = GMDaemon(settings_from(dict(
            name="gm0", index=0, listen="127.0.0.1:0", state_dir=str(tmp_path / "gm0"),
            lms=f"lm0={proxy.address}|{lms[0].address},lm1={lms[1].address}", gms="gm0=127.0.0.1:1",
            queue_map="a=gm0", view_max_age_s=30.0)))
        await gm.start()
        link = gm.links[0]
        try:
            await wait_until(lambda: asyncio.sleep(0, result=link.addr == proxy.address and link.usable), 20)
            proxy.cut("blackhole")        # held open, nothing forwarded: no error reaches the GM
            # keepalive: a ping every 10 s, answered within 5 s (tcluster/domain/bounds.py)
            await wait_until(lambda: asyncio.sleep(0, result=link.addr == lms[0].address and link.connected), 90)
            stub = federation_pb2_grpc.GlobalManagerServiceStub(gm.channel(f"127.0.0.1:{gm.port}"))
            job = await stub.Submit(fpb.FedSubmitRequest(spec=spec("a", 4)), timeout=10)

            async def placed() -> bool:
                return all(t.state == "RUNNING" for t in (await stub.Get(fpb.FedGetRequest(id=job.id))).tasks)
            await wait_until(placed)
            assert sum(lms[0].launches.values()) >= 1
        finally:
            await gm.stop()
            proxy.close()
            for lm in lms:
                await lm.stop()
    asyncio.run(main())


class ProxiedLMs:
    """Two fake LMs (one GM's partitions only), each behind a TcpProxy a test can cut."""

    async def __aenter__(self) -> ProxiedLMs:
        self.lms = [FakeLM(i, [NODE] * 2, gms=1) for i in range(2)]
        for lm in self.lms:
            await lm.start()
        self.proxies = [TcpProxy(("127.0.0.1", lm.port)) for lm in self.lms]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for proxy in self.proxies:
            proxy.close()
        for lm in self.lms:
            await lm.stop()

    def settings(self, tmp: Path):
        return settings_from(dict(
            name="gm0", index=0, listen="127.0.0.1:0", state_dir=str(tmp / "gm0"),
            lms=",".join(f"lm{i}={p.address}" for i, p in enumerate(self.proxies)), gms="gm0=127.0.0.1:1",
            queue_map="a=gm0"))


def gm_stub(d: GMDaemon) -> federation_pb2_grpc.GlobalManagerServiceStub:
    return federation_pb2_grpc.GlobalManagerServiceStub(d.channel(f"127.0.0.1:{d.port}"))


async def lose_the_answer(d: GMDaemon, fed: ProxiedLMs) -> tuple[int, str, str]:
    """A 1-task job placed, then its row put back to PLACING with the request the LM answered,
    as if the GM died before recording the answer. Returns (the LM, the job, the task)."""
    job = await gm_stub(d).Submit(fpb.FedSubmitRequest(spec=spec("a", 1)), timeout=10)
    await wait_until(lambda: asyncio.sleep(0, result=d.store.tasks("job_id=?", (job.id,))[0].state == "RUNNING"))
    row = d.store.tasks("job_id=?", (job.id,))[0]
    [lm] = [i for i, fake in enumerate(fed.lms) if fake.launches]
    first = list(fed.lms[lm].pure.answers)[0]
    req = fpb.PlaceRequest(request_id=first, gm=0, epoch=fed.lms[lm].pure.epoch, node=row.node,
                           task=fpb.FedTask(task_id=row.task_id, queue="a", req=fpb.Res(v=[1000, 512])))
    req.launch.SetInParent()
    d.store.placing(row.task_id, row.attempt, row.lm, row.node, req.SerializeToString())
    return lm, job.id, row.task_id


def count_calls(monkeypatch: pytest.MonkeyPatch, module: object, stub: str, method: str) -> list[object]:
    """The requests of every `method` call made through `module.stub` from now on: the RPCs
    a GM really sends (its guards run before them)."""
    calls: list[object] = []
    real = getattr(module, stub)

    class Counting:
        def __init__(self, channel: grpc.aio.Channel) -> None:
            self._real = real(channel)

        def __getattr__(self, name: str) -> object:
            return getattr(self._real, name)

    def counted(self: Counting, request: object, **kw: object) -> object:
        calls.append(request)
        return getattr(self._real, method)(request, **kw)
    setattr(Counting, method, counted)
    monkeypatch.setattr(module, stub, Counting)
    return calls


def count_sweeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When each sweep of the unanswered requests started, from now on."""
    import time
    from tcluster.gm.placing import Placer
    started: list[float] = []
    real = Placer._resend_all

    async def counted(self: Placer) -> None:
        started.append(time.monotonic())
        await real(self)
    monkeypatch.setattr(Placer, "_resend_all", counted)
    return started


def test_unanswered_requests_wait_for_their_lms_stream_and_go_when_it_is_back(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # A request whose answer was lost is sent again only to an LM with a live stream: resending
    # to one that is gone held the place loop (and every other LM's placements) for a Place
    # deadline per request per turn. Once the stream is back it goes, with the same id.
    async def main() -> None:
        async with ProxiedLMs() as fed:
            d = GMDaemon(fed.settings(tmp_path))
            await d.start()
            try:
                lm, job_id, task_id = await lose_the_answer(d, fed)
            finally:
                await d.stop()
            fed.proxies[lm].cut("reset")          # that LM is gone when the GM comes back
            places = count_calls(monkeypatch, federation_pb2_grpc, "LocalManagerServiceStub", "Place")
            sweeps = count_sweeps(monkeypatch)
            d = GMDaemon(fed.settings(tmp_path))
            await d.start()
            try:
                assert len(d.unanswered) == 1
                for _ in range(6):                # the place loop turns every 0.5 s while a request waits
                    await asyncio.sleep(0.5)
                assert places == [] and len(d.unanswered) == 1 and not d.links[lm].connected
                assert 2 <= len(sweeps) <= 10         # one each RESEND_EVERY_S (0.5 s), not a spin
                fed.proxies[lm].heal()
                await wait_until(lambda: asyncio.sleep(
                    0, result=d.store.tasks("job_id=?", (job_id,))[0].state == "RUNNING"))
                assert len(places) == 1 and not d.unanswered
                assert fed.lms[lm].launches == {task_id: 1} and fed.lms[lm].places[task_id] == 2   # the same id
            finally:
                await d.stop()
    asyncio.run(main())


def test_an_lm_slow_to_answer_holds_back_only_its_own_placements(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # One Place in flight per LM: while LM 0 sits on a request, the other tasks go to LM 1.
    # With one request at a time in all, LM 1 got nothing until LM 0 answered (or timed out).
    import tcluster.gm.placing
    monkeypatch.setattr(tcluster.gm.placing, "PLACE_TIMEOUT_S", 120.0)    # the gate, not a deadline, ends it

    async def main() -> None:
        async with ProxiedLMs() as fed:
            slow, fast = fed.lms
            slow.gate = asyncio.Event()
            d = GMDaemon(fed.settings(tmp_path))
            await d.start()
            try:
                await wait_until(lambda: asyncio.sleep(0, result=all(link.usable for link in d.links)), 20)
                job = await gm_stub(d).Submit(fpb.FedSubmitRequest(spec=spec("a", 6)), timeout=10)
                # (each fake counts a Place or a launch before the GM has its answer: the GM's own
                # count is waited for, and the held Place's arrival, which a busy host may delay)
                await wait_until(lambda: asyncio.sleep(0, result=sum(fast.launches.values()) >= 5
                                                       and d.gm.pending() == 1 and slow.held == 1), 60)
                assert sum(slow.launches.values()) == 0 and list(d.gm.in_flight) == [0] and not d.unanswered
                slow.gate.set()                       # LM 0 answers at last: its task launches there

                async def all_running() -> bool:
                    return all(t.state == "RUNNING" for t in (await gm_stub(d).Get(fpb.FedGetRequest(id=job.id))).tasks)
                await wait_until(all_running, 30)
                launched = [*slow.launches.elements(), *fast.launches.elements()]
                assert len(launched) == 6 == len(set(launched)) and sum(slow.launches.values()) == 1
            finally:
                await d.stop()
    asyncio.run(main())



def test_a_gm_stopped_while_a_place_is_held_sends_it_again_after_its_restart(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # The request is PLACING in the store with its bytes before it is sent: a GM stopped
    # while an LM sits on it returns at once, sends the same id again when it is back, and
    # the task runs once whichever copy the LM answers.
    import tcluster.gm.placing
    monkeypatch.setattr(tcluster.gm.placing, "PLACE_TIMEOUT_S", 120.0)

    async def main() -> None:
        async with ProxiedLMs() as fed:
            for lm in fed.lms:
                lm.gate = asyncio.Event()             # both hold: the one task waits at one of them
            d = GMDaemon(fed.settings(tmp_path))
            await d.start()
            try:
                await wait_until(lambda: asyncio.sleep(0, result=all(link.usable for link in d.links)), 20)
                job = await gm_stub(d).Submit(fpb.FedSubmitRequest(spec=spec("a", 1)), timeout=10)
                await wait_until(lambda: asyncio.sleep(0, result=sum(lm.held for lm in fed.lms) == 1), 20)
                [at] = [i for i, lm in enumerate(fed.lms) if lm.held]
            finally:
                await asyncio.wait_for(d.stop(), 30)  # the held call does not hold the stop
            d = GMDaemon(fed.settings(tmp_path))
            await d.start()
            try:
                [(lm, request, _p, _queue)] = d.unanswered
                assert lm == at and request.request_id.endswith(":0")     # the same id, to the same LM
                for fake in fed.lms:
                    fake.gate.set()

                async def running() -> bool:
                    return all(t.state == "RUNNING" for t in (await gm_stub(d).Get(fpb.FedGetRequest(id=job.id))).tasks)
                await wait_until(running, 30)
                assert sum(fed.lms[at].launches.values()) == 1 and not fed.lms[1 - at].launches
            finally:
                await d.stop()
    asyncio.run(main())


def test_a_task_whose_end_comes_before_its_place_answer_is_not_left_running(tmp_path: Path) -> None:
    # The answer and the stream's end travel apart: when the end comes first, the store keeps
    # the end (the answer does not make it RUNNING again) and the GM does not count the task
    # as running (a phantom there counted toward its queue's share in Alg. 2 for good).
    async def main() -> None:
        async with ProxiedLMs() as fed:
            for lm in fed.lms:
                lm.end_before_answer_s = 0.5
            d = GMDaemon(fed.settings(tmp_path))
            await d.start()
            try:
                await wait_until(lambda: asyncio.sleep(0, result=all(link.usable for link in d.links)), 20)
                job = await gm_stub(d).Submit(fpb.FedSubmitRequest(spec=spec("a", 1)), timeout=10)
                [task_id] = [t.task_id for t in d.store.tasks("job_id=?", (job.id,))]
                await wait_until(lambda: asyncio.sleep(0, result=d.gm.stats.launches == 1), 20)
                assert d.store.tasks("task_id=?", (task_id,))[0].state == "SUCCEEDED"
                assert task_id not in d.gm.running and d.gm.pending() == 0
            finally:
                await d.stop()
    asyncio.run(main())
