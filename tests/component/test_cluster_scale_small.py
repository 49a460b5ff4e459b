"""The load harness, small: 200 simulated agents (real protocol, real gRPC, one process)
against an in-process master, 2,000 tasks with churn and a cancel. Correctness
invariants only, no timing: every task launched once, nothing oversubscribed, every
event acknowledged, every kill answered. The same on the etcd store (issue 12; a real
one-member etcd): its group commits name the same job, task and node keys many times."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path

from testkit.loadgen.agents import Fleet
from tcluster.v1 import common_pb2, jobs_pb2
from testkit.etcd_single import SingleEtcd, single_etcd  # noqa: F401 - the fixture
from tests.component.harness import Harness, run, wait_until

GiB = 2**30
AGENTS, JOBS, TASKS_PER_JOB = 200, 20, 100
TERMINAL = (jobs_pb2.JOB_SUCCEEDED, jobs_pb2.JOB_FAILED, jobs_pb2.JOB_CANCELLED)


def test_two_hundred_agents_two_thousand_tasks(tmp_path: Path) -> None:
    run_fleet(tmp_path)


def test_two_hundred_agents_two_thousand_tasks_on_etcd(tmp_path: Path, single_etcd: SingleEtcd) -> None:  # noqa: F811
    run_fleet(tmp_path, store=single_etcd.url, store_prefix=f"/scale-{uuid.uuid4().hex[:8]}")


def run_fleet(tmp_path: Path, **store: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master(heartbeat_interval_s=0.5, **store)
        assert h.master is not None
        await asyncio.wait_for(h.master.leading.wait(), 30)   # etcd: a standby until it wins
        fleet = Fleet(h.address, [f"sim-{i:03d}" for i in range(AGENTS)], cpu=4, memory=8 * GiB,
                      streams_per_channel=50)
        try:
            await fleet.start(connect_rate=1000)
            assert await fleet.wait_registered(60), "not every simulated agent registered"
            # 800 one-core slots for 1,900 short tasks: they churn through; then 100 that
            # run until their job is cancelled (kills, answered by the agents).
            short = [await h.submit(["sleep", "0.2"], cpu=1, memory=GiB, tasks=TASKS_PER_JOB)
                     for _ in range(JOBS - 1)]
            endless = await h.submit(["sleep", "inf"], cpu=1, memory=GiB, tasks=TASKS_PER_JOB)
            await h.wait_job(endless.id, lambda j: all(t.state == common_pb2.TASK_RUNNING for t in j.tasks))
            await h.jobs.Cancel(jobs_pb2.CancelJobRequest(id=endless.id))

            async def all_ended() -> list[jobs_pb2.Job] | None:
                jobs = [await h.job(j.id) for j in short + [endless]]
                return jobs if all(j.state in TERMINAL for j in jobs) else None
            jobs = await wait_until(all_ended, timeout_s=120)

            async def all_acked() -> bool:
                return fleet.snapshot(reset=False).events_unacked_now == 0
            await wait_until(all_acked, timeout_s=30)
            stats = fleet.snapshot(reset=False)
        finally:
            await fleet.stop()

        assert not stats.errors, stats.errors[:5]
        # Every task launched exactly once (one attempt, one node), and nothing twice.
        launched = Counter(task_id for task_id, _, _, _ in stats.launches)
        expected = {f"{j.id}.{i}" for j in jobs for i in range(TASKS_PER_JOB)}
        assert set(launched) == expected
        assert set(launched.values()) == {1}
        assert {attempt for _, attempt, _, _ in stats.launches} == {1}
        assert stats.duplicate_launches == 0 and stats.rejected_conflict == 0
        # Nothing oversubscribed: no launch exceeded an agent's free resources.
        assert stats.rejected_oversubscribed == 0 and stats.max_used_fraction <= 1.0 + 1e-9
        # Every event acknowledged; every RUNNING persisted once per task.
        assert stats.events_unacked_now == 0 and stats.events_acked == stats.events_sent
        assert Counter(t for t, _, _ in stats.running_acked) == Counter({t: 1 for t in expected})
        # Every kill answered: the cancelled job's tasks all ended KILLED, on the agents' word.
        assert stats.kills == TASKS_PER_JOB and stats.kills_unknown == 0
        by_id = {j.id: j for j in jobs}
        assert by_id[endless.id].state == jobs_pb2.JOB_CANCELLED
        assert all(t.state == common_pb2.TASK_KILLED for t in by_id[endless.id].tasks)
        assert all(by_id[j.id].state == jobs_pb2.JOB_SUCCEEDED for j in short)
        assert stats.finished == (JOBS - 1) * TASKS_PER_JOB
        # Heartbeats flowed and were answered (how fast is the benchmark's business).
        assert stats.heartbeats_acked > 0
        nodes = (await h.cluster.ListNodes(jobs_pb2.ListNodesRequest())).nodes
        assert len(nodes) == AGENTS and all(n.free.cpu >= -1e-9 and n.free.memory >= 0 for n in nodes)
        assert all(not n.tasks for n in nodes)
    run(scenario, tmp_path)
