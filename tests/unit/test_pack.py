"""`tcl pack`: the invariants of Verma et al.'s metrics that hold exactly, and on a generated
heterogeneous cluster of 1,000 machines the paper's relation compaction ~ 1/f."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from tcluster.cli.main import main
from tcluster.cli.options import PACK_ORDERS
from tcluster.pack.generate import cluster, workload
from tcluster.pack.metrics import compaction, compaction_trial, hole_filling, inflate, inflation, utilization
from tcluster.pack.schedule import ORDERS, PackJob, Packer
from tcluster.scheduler.views import NodeSpec
from tcluster.pack.study import Settings, study
from tcluster.domain.resources import Resources

GiB = 2**30


@pytest.fixture(scope="module")
def small() -> tuple[list[NodeSpec], list[PackJob]]:
    return cluster(60, seed=3), workload(60, 0.5, seed=3)


def test_utilization_is_identical_for_policies_that_place_everything(small) -> None:  # type: ignore[no-untyped-def]
    machines, jobs = small
    light = jobs[: len(jobs) // 2]
    passes = [Packer(machines, policy).run(light, None, 0) for policy in ("first-fit", "best-fit", "tetris", "lotes")]
    assert all(p.pending == 0 for p in passes)
    for p in passes[1:]:
        assert np.array_equal(utilization(p), utilization(passes[0]))


@pytest.mark.parametrize("policy", ["first-fit", "worst-fit", "lotes"])
def test_utilization_le_hole_filling_le_one(small, policy: str) -> None:  # type: ignore[no-untyped-def]
    machines, jobs = small
    packer = Packer(machines, policy)
    p = packer.run(jobs, None, 0)
    util = utilization(p)
    for unit in (0.01, 0.05, 0.25, 0.5, 1.0, 5.0):
        holes = hole_filling(p, unit, packer.median)
        assert (util <= holes + 1e-12).all() and (holes <= 1 + 1e-12).all()
    assert np.allclose(hole_filling(p, 100.0, packer.median), util)   # a unit bigger than every machine


def test_inflation_at_one_adds_nothing(small) -> None:  # type: ignore[no-untyped-def]
    machines, jobs = small
    packer = Packer(machines, "first-fit")
    scope = [True] * len(jobs)
    assert inflate(packer, jobs, 1.0, False, scope) == list(jobs)
    assert [j.request for j in inflate(packer, jobs, 1.0, True, scope)] == [j.request for j in jobs]
    grown = inflate(packer, jobs, 1.5, False, scope)
    assert sum(j.tasks for j in grown) == sum(j.tasks + -(-j.tasks // 2) for j in jobs)


def test_compaction_returns_a_feasible_size_and_terminates_for_mu_one(small) -> None:  # type: ignore[no-untyped-def]
    machines, jobs = small
    packer, tau = Packer(machines, "best-fit"), 0.004
    for seed in range(3):
        size = compaction_trial(packer, jobs, tau, 1, seed)
        permutation = list(range(len(machines)))
        random.Random(seed).shuffle(permutation)
        assert packer.run(jobs, permutation[:size], 0).pending_fraction <= tau
        assert packer.run(jobs, permutation[:size - 1], 0).pending_fraction > tau   # mu = 1: the exact boundary


def test_compaction_of_identical_machines_is_the_bin_count() -> None:
    machines = [NodeSpec(f"m{i:02d}", Resources(4, 4 * GiB)) for i in range(20)]
    jobs = [PackJob("a", 30, Resources(1, 1 * GiB))]   # 4 per machine: 8 machines
    result = compaction(machines, jobs, "first-fit", "arrival", 0.0, trials=11)
    assert result.sizes == (8,) * 11 and result.p90 == pytest.approx(0.4)


def test_the_expansion_step_lets_an_overfull_workload_be_measured() -> None:
    machines = [NodeSpec(f"m{i}", Resources(4, 4 * GiB)) for i in range(4)]
    jobs = [PackJob("a", 24, Resources(1, 1 * GiB))]   # needs 6 machines of 4
    result = compaction(machines, jobs, "first-fit", "arrival", 0.0, trials=3)
    assert result.expanded == 1 and result.p90 == pytest.approx(1.5)


def test_same_seed_same_output(small) -> None:  # type: ignore[no-untyped-def]
    machines, jobs = small
    settings = Settings(trials=2, metrics=("util", "holes", "mc", "compaction"))
    assert study(machines, jobs, "random-fit", settings) == study(machines, jobs, "random-fit", settings)


def test_orders_sort_jobs_by_the_papers_keys(small) -> None:  # type: ignore[no-untyped-def]
    machines, jobs = small
    for order, kind in (("cpu", 0), ("mem", 1)):
        packer = Packer(machines, "first-fit", order)
        sizes = [packer.vector(jobs[i].request)[kind] for i in packer.ordered(jobs)]
        assert sizes == sorted(sizes, reverse=True)


def test_compaction_is_near_one_over_the_horizontal_conforming_factor() -> None:
    """Verma et al., section III-D: compaction ~ 1/f (the paper's worst case is 0.11 off).
    Paper scale in machines (1,000), fewer trials to stay quick."""
    machines, jobs = cluster(1000, seed=5), workload(1000, 0.4, seed=5)
    packer = Packer(machines, "first-fit")
    factor = inflation(packer, jobs, False, True, 0.004, 0).factor
    result = compaction(machines, jobs, "first-fit", "arrival", 0.004, trials=3)
    assert abs(result.p90 - 1 / factor) <= 0.12


def test_tcl_pack_json_and_errors(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    scenario = tmp_path / "s.yaml"
    scenario.write_text("nodes:\n  - {count: 6, name_prefix: n, capacity: {cpu: 4, memory: 4Gi}}\n"
                        "jobs:\n  - {name: a, tasks: 9, resources: {cpu: 1, memory: 1Gi}}\n"
                        "  - {name: b, tasks: 3, resources: {cpu: 2, memory: 512Mi}, constraints: [\"rack=r1\"]}\n")
    assert main(["pack", str(scenario), "--placement", "first-fit,lotes", "--trials", "3", "-o", "json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert [r["policy"] for r in results] == ["first-fit", "lotes"]
    assert all(r["pending"] == 3 for r in results)   # no node has rack=r1
    assert results[0]["compaction"]["p90"] is None     # 25% pending at any size: no answer
    assert main(["pack", str(scenario), "--placement", "first-fit", "--tau", "0.3", "--trials", "3", "-o", "json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert result["compaction"]["p90"] == pytest.approx(0.5)   # 9 tasks of 1 cpu on 4-cpu nodes: 3 of 6
    assert main(["pack", str(scenario), "--order", "size"]) == 2
    assert main(["pack"]) == 2
    assert main(["pack", str(scenario), "--placement", "nope"]) == 2


def test_from_master_reads_nodes_and_unfinished_tasks(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from tcluster.cli import client as client_module
    from tcluster.v1 import common_pb2, jobs_pb2

    class FakeClient:
        def __init__(self, master: str) -> None:
            pass

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def list_nodes(self) -> list:
            return [jobs_pb2.Node(name=f"n{i}", capacity=common_pb2.Resources(cpu=4, memory=4 * GiB),
                                  labels={"rack": "r1"}) for i in range(3)]

        def list_jobs(self, states, queue, limit) -> list:  # type: ignore[no-untyped-def]
            spec = jobs_pb2.JobSpec(name="a", tasks=3, resources=common_pb2.Resources(cpu=2, memory=GiB))
            tasks = [jobs_pb2.Task(index=i, state=s) for i, s in
                     enumerate((common_pb2.TASK_RUNNING, common_pb2.TASK_SUCCEEDED, common_pb2.TASK_PENDING))]
            return [jobs_pb2.Job(id="j1", spec=spec, tasks=tasks)]

    monkeypatch.setattr(client_module, "MasterClient", FakeClient)
    assert main(["pack", "--from-master", "--placement", "first-fit", "--metrics", "util", "-o", "json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert result["machines"] == 3 and result["tasks"] == 2     # the succeeded task is not packed
    assert result["utilization"]["cpu"] == pytest.approx(4 / 12)


def test_the_cli_offers_the_orders_pack_knows() -> None:
    # cli/options.py names them again so that `tcl --help` need not import numpy.
    assert PACK_ORDERS == ORDERS
