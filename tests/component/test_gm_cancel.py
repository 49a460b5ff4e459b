"""GlobalManagerService.Cancel and List paging against fake LMs (testkit/fake_lm.py):
pending tasks end CANCELLED before the answer, placed ones through the LM master's
JobService.Cancel, the intent survives a GM restart, Cancel is forwarded to the owner and
idempotent; List pages newest first."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from tests.component.harness import wait_until
from tests.component.test_gm_daemon import Fed, ProxiedLMs, count_calls, gm_stub, job_of, scenario, spec
from tcluster.gm.daemon import GMDaemon
from tcluster.v1 import federation_pb2 as fpb, jobs_pb2_grpc


def states(job: fpb.FedJob) -> list[str]:
    return [t.state for t in job.tasks]


async def running(fed: Fed, job_id: str, n: int) -> None:
    async def placed() -> bool:
        return states(await job_of(fed, 0, job_id)).count("RUNNING") == n
    await wait_until(placed)


def test_cancel_ends_pending_tasks_at_once_and_placed_ones_through_the_lm(tmp_path: Path) -> None:
    async def body(fed: Fed) -> None:
        # 2 LMs x 2 nodes of 4 cores (gm0 repartitions gm1's idle ones): 4 tasks of 4 cores run, 2 wait.
        job = await fed.stub(0).Submit(fpb.FedSubmitRequest(spec=spec("a", 6, cpu=4.0)))
        await running(fed, job.id, 4)
        await asyncio.sleep(0.3)
        assert states(await job_of(fed, 0, job.id)).count("PENDING") == 2
        got = await fed.stub(1).Cancel(fpb.FedCancelRequest(id=job.id))     # forwarded to gm0
        assert got.gm == "gm0" and sorted(states(got)) == ["CANCELLED"] * 2 + ["RUNNING"] * 4
        assert got.state == "RUNNING"

        async def cancelled() -> bool:
            return (await job_of(fed, 0, job.id)).state == "CANCELLED"
        await wait_until(cancelled)
        done = await job_of(fed, 0, job.id)
        assert states(done) == ["CANCELLED"] * 6 and sum(n for lm in fed.lms for n in lm.cancels.values()) == 4
        again = await fed.stub(0).Cancel(fpb.FedCancelRequest(id=job.id))     # idempotent
        await asyncio.sleep(0.2)
        assert again.state == "CANCELLED" and sum(n for lm in fed.lms for n in lm.cancels.values()) == 4
        assert fed.gms[0].store.cancelling() == []
        assert sum(fed.launches().values()) == 4           # nothing placed after the cancel
    scenario(tmp_path, body, nodes=2)


def test_cancel_intent_survives_a_gm_restart(tmp_path: Path) -> None:
    async def body(fed: Fed) -> None:
        job = await fed.stub(0).Submit(fpb.FedSubmitRequest(spec=spec("a", 3)))
        await running(fed, job.id, 3)
        for lm in fed.lms:
            lm.cancel_down = True                     # the LMs' masters do not take it yet
        got = await fed.stub(0).Cancel(fpb.FedCancelRequest(id=job.id))
        assert states(got) == ["RUNNING"] * 3
        await asyncio.sleep(0.2)
        await fed.gms[0].stop()
        fed.gms[0] = None
        for lm in fed.lms:
            lm.cancel_down = False
        await fed.start_gm(0)

        async def cancelled() -> bool:
            return (await job_of(fed, 0, job.id)).state == "CANCELLED"
        await wait_until(cancelled)
        assert sum(n for lm in fed.lms for n in lm.cancels.values()) == 3
    scenario(tmp_path, body)


def test_a_task_of_a_cancelled_job_back_in_its_queue_is_not_placed_again(tmp_path: Path) -> None:
    async def body(fed: Fed) -> None:
        d = fed.gms[0]
        job = await fed.stub(0).Submit(fpb.FedSubmitRequest(spec=spec("a", 1)))
        await running(fed, job.id, 1)
        for lm in fed.lms:
            lm.cancel_down = True
        await fed.stub(0).Cancel(fpb.FedCancelRequest(id=job.id))
        # As a preempted task (or one an LM refused) goes back to its queue, before any sweep.
        [row] = d.store.tasks("job_id=?", (job.id,))
        d.store.back_to_pending(row.task_id, row.attempt + 1)
        d.enqueue(d.store.tasks("job_id=?", (job.id,))[0])
        await wait_until(lambda: asyncio.sleep(0, result=d.store.tasks("job_id=?", (job.id,))[0].state == "CANCELLED"))
        await asyncio.sleep(0.3)
        assert sum(lm.places[row.task_id] for lm in fed.lms) == 1 and d.gm.pending() == 0
    scenario(tmp_path, body)


def test_pending_tasks_of_a_cancelled_job_are_not_placed_after_a_restart(tmp_path: Path) -> None:
    async def body(fed: Fed) -> None:
        d = fed.gms[0]
        job = await fed.stub(0).Submit(fpb.FedSubmitRequest(spec=spec("a", 2)))
        await running(fed, job.id, 2)
        await d.stop()
        fed.gms[0] = None
        # As if the GM died right after the intent was written, before the pending ones ended.
        from tcluster.gm.store import GMStore
        store = GMStore(str(tmp_path / "gm0"))
        store.add_job(0, "a", "", spec("a", 1).SerializeToString(), 1, "")
        later = store.jobs()[-1].id
        store.cancel(later)
        store.close()
        await fed.start_gm(0)
        got = await job_of(fed, 0, later)
        assert states(got) == ["CANCELLED"]
        await asyncio.sleep(0.5)
        assert f"{later}.0" not in fed.launches()
    scenario(tmp_path, body)


def test_cancel_of_an_unknown_job_is_not_found(tmp_path: Path) -> None:
    async def body(fed: Fed) -> None:
        for bad in ("f0-999", "f1-999", "nope"):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await fed.stub(0).Cancel(fpb.FedCancelRequest(id=bad))
            assert e.value.code() == grpc.StatusCode.NOT_FOUND and repr(bad) in e.value.details()
    scenario(tmp_path, body)


def test_list_pages_newest_first(tmp_path: Path) -> None:
    async def body(fed: Fed) -> None:
        ids = [(await fed.stub(0).Submit(fpb.FedSubmitRequest(spec=spec("a", 1, cpu=0.1)))).id for _ in range(7)]
        seen, token, pages = [], "", 0
        while True:
            page = await fed.stub(0).List(fpb.FedListRequest(limit=3, page_token=token))
            seen += [j.id for j in page.jobs]
            pages += 1
            token = page.next_page_token
            if not token:
                break
        assert seen == ids[::-1] and pages == 3
        first = await fed.stub(0).List(fpb.FedListRequest())
        assert [j.id for j in first.jobs] == ids[::-1] and first.next_page_token == ""
        assert (await fed.stub(0).List(fpb.FedListRequest(queue="b"))).jobs == []
        for bad, field in ((fpb.FedListRequest(limit=1001), "limit"), (fpb.FedListRequest(page_token="x"), "page_token")):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await fed.stub(0).List(bad)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and e.value.details().startswith(field)
    scenario(tmp_path, body)


def test_placed_tasks_of_a_cancelled_job_wait_for_their_lm_to_be_back(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # The cancel of a task at an LM with no live stream is left for a later sweep instead of
    # waiting out a call's deadline per task per sweep (other jobs' cancels queue behind it).
    async def main() -> None:
        async with ProxiedLMs() as fed:
            calls = count_calls(monkeypatch, jobs_pb2_grpc, "JobServiceStub", "Cancel")
            d = GMDaemon(fed.settings(tmp_path))
            await d.start()
            try:
                await cancel_while_cut(d, fed, calls)
            finally:
                await d.stop()
    asyncio.run(main())


async def cancel_while_cut(d: GMDaemon, fed: ProxiedLMs, calls: list[object]) -> None:
    stub = gm_stub(d)
    job = await stub.Submit(fpb.FedSubmitRequest(spec=spec("a", 2)), timeout=10)

    async def placed() -> bool:
        return states(await stub.Get(fpb.FedGetRequest(id=job.id), timeout=10)) == ["RUNNING"] * 2
    await wait_until(placed)
    for proxy in fed.proxies:
        proxy.cut("reset")
    await wait_until(lambda: asyncio.sleep(0, result=not any(link.connected for link in d.links)))
    got = await stub.Cancel(fpb.FedCancelRequest(id=job.id), timeout=10)
    assert states(got) == ["RUNNING"] * 2
    await asyncio.sleep(2.5)                 # two sweeps and more (SWEEP_S 1 s)
    assert calls == [] and sum(n for lm in fed.lms for n in lm.cancels.values()) == 0
    for proxy in fed.proxies:
        proxy.heal()

    async def cancelled() -> bool:
        return (await stub.Get(fpb.FedGetRequest(id=job.id), timeout=10)).state == "CANCELLED"
    await wait_until(cancelled)
    assert len(calls) == 2 and len({c.id for c in calls}) == 2     # one cancel per task, once
    assert sum(n for lm in fed.lms for n in lm.cancels.values()) == 2
