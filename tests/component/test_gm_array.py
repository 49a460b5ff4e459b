"""Issue 35: a federated array's throttle in a live tcl-gm against fake LMs
(tests/component/test_gm_daemon.py's Fed): `0-9:2%2` has tasks f0-N.0, .2, ... .8; at most 2
are placed at once, also across a GM restart (the running ones count against %2); each
end lets one more in, each index placed once; a cancel ends the held ones too."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.component.harness import wait_until
from tests.component.test_gm_daemon import Fed, job_of, scenario, spec
from tcluster.v1 import federation_pb2 as fpb

INDEXES = [0, 2, 4, 6, 8]


def _array(text: str) -> fpb.FedSubmitRequest:
    s = spec("a", 1)
    s.array = text
    return fpb.FedSubmitRequest(spec=s)


def _running(fed: Fed) -> list[str]:
    return [t for lm in fed.lms for t in lm.pure.running]


async def _states(fed: Fed, job_id: str) -> dict[int, str]:
    return {t.index: t.state for t in (await job_of(fed, 0, job_id)).tasks}


def test_a_throttled_array_places_at_most_its_throttle_also_across_a_restart(tmp_path: Path) -> None:
    async def body(fed: Fed) -> None:
        job = await fed.stub(0).Submit(_array("0-9:2%2"))
        assert sorted(t.index for t in job.tasks) == INDEXES
        await wait_until(lambda: asyncio.sleep(0, result=len(_running(fed)) == 2))
        await asyncio.sleep(0.5)                         # a few placing rounds: still 2
        assert len(_running(fed)) == 2 and len(fed.launches()) == 2
        await fed.gms[0].stop()
        fed.gms[0] = None
        await fed.start_gm(0)
        await wait_until(lambda: asyncio.sleep(0, result=all(link.usable for link in fed.gms[0].links)))
        await asyncio.sleep(0.5)
        assert len(fed.launches()) == 2, fed.launches()  # the running two count against %2
        first = sorted(fed.launches())
        for lm in fed.lms:
            for t in [t for t in lm.pure.running if t in first[:1]]:
                lm.end(t)
        await wait_until(lambda: asyncio.sleep(0, result=len(fed.launches()) == 3))
        assert len(_running(fed)) == 2
        for _ in range(3):                               # end what runs until all have run
            for lm in fed.lms:
                for t in list(lm.pure.running):
                    lm.end(t)
            await asyncio.sleep(0.3)
        await wait_until(lambda: asyncio.sleep(0, result=len(fed.launches()) == 5))
        for lm in fed.lms:
            for t in list(lm.pure.running):
                lm.end(t)

        async def done() -> bool:
            return (await job_of(fed, 0, job.id)).state == "SUCCEEDED"
        await wait_until(done)
        assert fed.launches() == {f"{job.id}.{i}": 1 for i in INDEXES}
        assert fed.gms[0].throttle.jobs == {}            # nothing held: nothing kept
    scenario(tmp_path, body)


def test_cancelling_a_throttled_array_ends_the_held_tasks_and_places_none_of_them(tmp_path: Path) -> None:
    async def body(fed: Fed) -> None:
        job = await fed.stub(0).Submit(_array("0-9%3"))
        await wait_until(lambda: asyncio.sleep(0, result=len(_running(fed)) == 3))
        await fed.stub(0).Cancel(fpb.FedCancelRequest(id=job.id))
        await wait_until(lambda: asyncio.sleep(0, result=_running(fed) == []))
        await asyncio.sleep(0.5)

        async def cancelled() -> bool:
            return set((await _states(fed, job.id)).values()) == {"CANCELLED"}
        await wait_until(cancelled)
        assert len(fed.launches()) == 3                  # none of the 7 held was placed
        assert fed.gms[0].throttle.jobs == {}
    scenario(tmp_path, body)
