"""Group commit: one transaction for the steps that queued meanwhile; effects only after
the write; a failed write fails every waiter, drops their effects and triggers recovery;
a step the store refuses on its own fails alone."""

from __future__ import annotations

import asyncio

import pytest

from tcluster.master.store.committer import Committer
from tcluster.master.core.events import Ack, Step
from tcluster.master.store.base import StoreRefused
from tcluster.master.store.sqlite import StoreError
from tcluster.domain.model import Job, JobSpec
from tcluster.domain.resources import Resources


class FakeStore:
    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.fail = False
        self.refuse: set[str] = set()       # jobs whose steps the store refuses on their own
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    def apply_many(self, steps: list[tuple[Step, list[str]]]) -> None:
        if self.fail:
            raise StoreError("the master cannot write its state (disk full)")
        self.batches.append([j for step, _ in steps for j in step.jobs])

    async def commit(self, steps: list[tuple[Step, list[str]]]) -> list[Exception | None]:
        if self.gate is not None:
            self.entered.set()
            await self.gate.wait()
        kept = [(step, new) for step, new in steps if not set(step.jobs) & self.refuse]
        self.apply_many(kept)
        return [StoreRefused("too large") if set(step.jobs) & self.refuse else None for step, _ in steps]


def job_step(job_id: str) -> Step:
    return Step(jobs={job_id: Job(job_id, JobSpec(("x",), Resources(1)), 0.0)}, actions=[Ack(job_id, 1)])


def test_steps_queued_together_share_one_write_and_effects_follow_it() -> None:
    async def body() -> None:
        store, sent, failures = FakeStore(), [], []
        committer = Committer(store, sent.extend, lambda: failures.append(1))  # type: ignore[arg-type]
        futures = [committer.add(job_step(f"j{i}"), [f"j{i}"]) for i in range(5)]
        assert sent == []                          # nothing visible before the write
        await asyncio.gather(*futures)
        assert store.batches == [["j0", "j1", "j2", "j3", "j4"]]
        assert [a.node for a in sent] == ["j0", "j1", "j2", "j3", "j4"] and not failures
        await committer.add(Step(actions=[Ack("beat", 0)]), [])      # nothing durable: no write
        assert len(store.batches) == 1 and sent[-1] == Ack("beat", 0) and committer.idle
    asyncio.run(body())


def test_a_failed_write_fails_its_waiters_drops_effects_and_recovers() -> None:
    async def body() -> None:
        store, sent, failures = FakeStore(), [], []
        committer = Committer(store, sent.extend, lambda: failures.append(1))  # type: ignore[arg-type]
        store.fail = True
        futures = [committer.add(job_step(f"j{i}"), [f"j{i}"]) for i in range(3)]
        for future in futures:
            with pytest.raises(StoreError, match="cannot write"):
                await future
        assert sent == [] and failures == [1]
        store.fail = False
        await committer.add(job_step("k"), ["k"])
        assert store.batches == [["k"]] and [a.node for a in sent] == ["k"]
    asyncio.run(body())


def test_a_step_refused_on_its_own_fails_alone_and_later_ones_are_sent_again() -> None:
    async def body() -> None:
        store, sent, failures = FakeStore(), [], []
        store.refuse, store.gate = {"bad"}, asyncio.Event()
        committer = Committer(store, sent.extend, lambda: failures.append(1))  # type: ignore[arg-type]
        batch = [committer.add(job_step(j), [j]) for j in ("a", "bad", "b")]
        await store.entered.wait()               # the batch is being written ...
        meanwhile = committer.add(job_step("c"), ["c"])   # ... computed on memory about to be reloaded
        store.gate.set()
        results = await asyncio.gather(*batch, meanwhile, return_exceptions=True)
        assert results[0] is None and results[2] is None
        assert isinstance(results[1], StoreRefused) and "refused" in str(results[1])
        assert isinstance(results[3], StoreError) and "send it again" in str(results[3])
        assert store.batches == [["a", "b"]] and [a.node for a in sent] == ["a", "b"]
        assert failures == [1] and committer.idle      # memory rebuilt once from the store
    asyncio.run(body())
