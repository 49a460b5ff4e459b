"""Fairness through the live master: --fairness drf|hdrf|mch, the queue tree, shares in
Get and ListQueues, refusals at submit, and reloading the queue file."""

from __future__ import annotations

import asyncio
import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import grpc
import pytest

from tcluster.cli.main import main as tcl_main
from tcluster.master.app.main import main as master_main
from tcluster.v1 import common_pb2, jobs_pb2
from tests.component.harness import Harness, run, wait_until

GiB = 2**30
# ads is guaranteed 3/4 of the cluster and dev 1/4; inside ads, prod gets 2/3.
QUEUES = """\
queues:
  ads:
    weight: 3
    queues: {prod: {weight: 2}, test: {weight: 1}}
  dev: {weight: 1}
"""


async def submit(h: Harness, queue: str, tasks: int, cpu: float = 1, weight: float = 0) -> jobs_pb2.Job:
    spec = jobs_pb2.JobSpec(command=["sleep"], tasks=tasks, queue=queue, weight=weight)
    spec.resources.cpu, spec.resources.memory = cpu, GiB // 8
    return await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec))


def running(job: jobs_pb2.Job) -> int:
    return sum(t.state == common_pb2.TASK_RUNNING for t in job.tasks)


async def settle(h: Harness, job_ids: list[str], total: int) -> list[jobs_pb2.Job]:
    async def check() -> list[jobs_pb2.Job] | None:
        jobs = [await h.job(j) for j in job_ids]
        return jobs if sum(running(j) for j in jobs) == total else None
    return await wait_until(check)   # type: ignore[return-value]


@pytest.mark.parametrize("policy, expected", [
    ("drf", [4, 4, 4]),      # flat: every job the same, queues ignored
    ("hdrf", [6, 3, 3]),     # ads 9 of 12 (prod 6, test 3), dev 3
    ("mch", [6, 3, 3]),
])
def test_the_fairness_flag_drives_the_live_master(tmp_path: Path, policy: str, expected: list[int]) -> None:
    (tmp_path / "queues.yaml").write_text(QUEUES)

    async def scenario(h: Harness) -> None:
        await h.start_master(fairness=policy, queues_file=tmp_path / "queues.yaml")
        # All three jobs wait for the node, so one round sees them together.
        jobs = [await submit(h, "ads.prod", 20), await submit(h, "ads.test", 20), await submit(h, "dev", 20)]
        await h.add_agent("n1", cpus=12, memory=16 * GiB)
        settled = await settle(h, [j.id for j in jobs], 12)
        assert [running(j) for j in settled] == expected
        assert settled[0].dominant_share == pytest.approx(expected[0] / 12)
    run(scenario, tmp_path)


def test_queues_show_guarantees_shares_and_counts(tmp_path: Path) -> None:
    (tmp_path / "queues.yaml").write_text(QUEUES)

    async def scenario(h: Harness) -> None:
        await h.start_master(queues_file=tmp_path / "queues.yaml")
        prod = await submit(h, "ads.prod", 10, weight=2)
        await h.add_agent("n1", cpus=4, memory=16 * GiB)
        await settle(h, [prod.id], 4)
        reply = await h.cluster.ListQueues(jobs_pb2.ListQueuesRequest())
        assert reply.fairness == "mch" and reply.source.endswith("queues.yaml")
        rows = {q.path: q for q in reply.queues}
        # ads.prod shares by users (the default): its one user (no tokens: anonymous) has a row
        assert [q.path for q in reply.queues] == ["", "ads", "ads.prod", "ads.prod/anonymous", "ads.test", "dev"]
        assert rows["ads.prod/anonymous"].user == "anonymous" and rows["ads.prod/anonymous"].running_tasks == 4
        assert rows["ads.prod"].guaranteed_share == pytest.approx(0.5)
        assert rows["ads"].dominant_share == pytest.approx(1.0) and rows["ads"].running_tasks == 4
        assert rows["ads.prod"].pending_tasks == 6 and rows["dev"].running_tasks == 0
        assert (await h.job(prod.id)).spec.weight == 2
        out = io.StringIO()
        with redirect_stdout(out):   # `tcl queues -o json`, in a thread: the master runs on this loop
            assert await asyncio.to_thread(tcl_main, ["--master", h.address, "queues", "-o", "json"]) == 0
        listed = {q["path"]: q for q in json.loads(out.getvalue())["queues"]}
        assert listed["ads.prod"]["running_tasks"] == 4 and listed["ads.test"]["guaranteed_share"] == 0.25
    run(scenario, tmp_path)


@pytest.mark.parametrize("queue, what", [("ads", "is not a leaf queue"), ("ops", "is not a queue"),
                                         ("default", "is not a queue")])
def test_submitting_to_a_queue_that_is_not_a_leaf_is_refused_with_the_leaves(
        tmp_path: Path, queue: str, what: str) -> None:
    (tmp_path / "queues.yaml").write_text(QUEUES)

    async def scenario(h: Harness) -> None:
        await h.start_master(queues_file=tmp_path / "queues.yaml")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await submit(h, queue, 1)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert what in caught.value.details() and "ads.prod, ads.test, dev" in caught.value.details()
        listed = await h.jobs.List(jobs_pb2.ListJobsRequest())
        assert not listed.jobs
    run(scenario, tmp_path)


def test_reload_takes_a_good_file_and_keeps_the_old_tree_on_a_bad_one(tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(QUEUES)

    async def scenario(h: Harness) -> None:
        await h.start_master(queues_file=path)
        service = h.master.service
        job = await submit(h, "dev", 2)
        path.write_text(QUEUES + "  ops: {weight: 2}\n")
        assert "reloaded" in service.reload_queues()
        assert service.queues.leaves == ("ads.prod", "ads.test", "dev", "ops")
        await submit(h, "ops", 1)
        for bad, words in [("queues:\n  ads: {weight: 0}\n", "queues.yaml:2: queues.ads.weight"),
                           ("queues:\n  ads: {parent: dev}\n  dev: {parent: ads}\n", "cycle"),
                           (QUEUES.replace("  dev: {weight: 1}\n", "") + "  ops: {}\n", "'dev' still has 1 unfinished")]:
            path.write_text(bad)
            message = service.reload_queues()
            assert "old tree stays in force" in message and words in message
            assert service.queues.leaves == ("ads.prod", "ads.test", "dev", "ops")
        assert (await h.job(job.id)).spec.queue == "dev"   # no job was touched
    run(scenario, tmp_path)


def test_a_bad_queue_file_stops_the_master_naming_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "queues.yaml").write_text("queues:\n  a: {weight: 1}\n  b:\n    weight: -1\n")
    code = master_main(["--queues", str(tmp_path / "queues.yaml"), "--data-dir", str(tmp_path / "d"),
                        "--listen", "127.0.0.1:0"])
    assert code == 2
    assert "queues.yaml:4: queues.b.weight: -1 must be > 0" in capsys.readouterr().err
    assert master_main(["--fairness", "lottery", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0"]) == 2
