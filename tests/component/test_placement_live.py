"""Placement through the live master: policies, constraints and their pending reasons."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from tcluster.agent.main import main as agent_main
from tcluster.master.app.main import main as master_main
from tcluster.master.settings import MasterSettings
from tcluster.v1 import common_pb2, jobs_pb2
from tests.component.harness import Harness, run

GiB = 2**30


def _running(job: jobs_pb2.Job) -> bool:
    return all(t.state == common_pb2.TASK_RUNNING for t in job.tasks)


def test_constraints_pick_matching_nodes_and_wait_with_a_reason(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        await h.add_agent("a-ssd", labels={"rack": "r1", "disk": "ssd"})
        await h.add_agent("b-hdd", labels={"rack": "r2", "disk": "hdd"})
        job = await h.submit(["sleep"], tasks=2, constraints=["disk!=hdd", "rack in (r1,r2)"])
        job = await h.wait_job(job.id, _running)
        assert {t.node for t in job.tasks} == {"a-ssd"}
        gpu = await h.submit(["sleep"], constraints=["has gpu"])
        gpu = await h.wait_job(gpu.id, lambda j: "constraint" in j.pending_reason)
        assert gpu.pending_reason == "no node matches constraint 'has gpu'"
        assert gpu.state == jobs_pb2.JOB_PENDING
        await h.add_agent("c-gpu", labels={"gpu": "a100"})
        gpu = await h.wait_job(gpu.id, _running)
        assert gpu.tasks[0].node == "c-gpu" and gpu.pending_reason == ""
        full = await h.submit(["sleep"], cpu=3, constraints=["rack=r1"])
        full = await h.wait_job(full.id, lambda j: bool(j.pending_reason))
        assert "no node has enough cpu right now" in full.pending_reason and "a-ssd" in full.pending_reason
        assert "among nodes matching the constraints" in full.pending_reason
    run(scenario, tmp_path)


def test_anbf_is_the_default_and_placement_is_chosen_at_start(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master(placement="worst-fit")
        await h.add_agent("n1", cpus=4)
        await h.add_agent("n2", cpus=4)
        job = await h.wait_job((await h.submit(["sleep"], tasks=2)).id, _running)
        assert sorted(t.node for t in job.tasks) == ["n1", "n2"]    # worst-fit spreads
    run(scenario, tmp_path)
    assert MasterSettings().placement == "anbf"


def test_bad_constraint_is_refused_at_submit_with_its_position(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await h.submit(["true"], constraints=["arch in (x86_64,"])
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "constraint" in info.value.details() and "position 17" in info.value.details()
    run(scenario, tmp_path)


def test_unknown_placement_is_refused_at_master_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert master_main(["--placement", "best", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err
    assert "--placement" in err and "anbf" in err and "first-fit" in err and "tetris" in err


@pytest.mark.parametrize("labels", ["rack=r 1", "bad key=x", "rack", "k=v;x=y"])
def test_labels_with_illegal_characters_are_refused_by_the_agent(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], labels: str) -> None:
    code = agent_main(["--labels", labels, "--runtime", "process", "--state-dir", str(tmp_path), "--cpus", "1",
                       "--memory", "1Gi"])
    assert code == 2 and "--labels" in capsys.readouterr().err
