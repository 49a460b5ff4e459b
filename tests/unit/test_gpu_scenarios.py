"""GPU scenarios through `tcl sim` and `tcl pack`: examples/gpu-fair-split.yaml (a GPU-heavy
and a CPU-heavy queue on two GPU nodes) against the hand computation in its header."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tcluster.cli.main import main
from tcluster.sim.scenario import load_scenario

SCENARIO = str(Path(__file__).resolve().parents[2] / "examples" / "gpu-fair-split.yaml")
GiB = 2**30


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def hand_computation() -> tuple[int, Fraction, Fraction]:
    """DRF's progressive filling done by hand over exact fractions: tasks each queue gets,
    and its dominant share. Totals <24 cores, 128Gi, 8 GPUs>."""
    total = {"cpu": Fraction(24), "memory": Fraction(128), "gpu": Fraction(8)}
    train = {"cpu": Fraction(1), "memory": Fraction(4), "gpu": Fraction(1)}
    etl = {"cpu": Fraction(3), "memory": Fraction(4), "gpu": Fraction(0)}
    dominant = [max(t[k] / total[k] for k in total) for t in (train, etl)]
    assert dominant == [Fraction(1, 8), Fraction(1, 8)]           # gpu for train, cpu for etl
    k = 0                                                         # equal shares: one task each per step
    while all(train[r] * (k + 1) + etl[r] * (k + 1) <= total[r] for r in total):
        k += 1
    return k, dominant[0] * k, dominant[1] * k


def test_the_scenario_declares_gpu_nodes_and_gpu_jobs() -> None:
    scenario = load_scenario(SCENARIO)
    assert [n.capacity.get("gpu") for n in scenario.nodes] == [4, 4]
    assert dict(scenario.nodes[0].labels)["gpu.model"] == "H100"
    train, etl = scenario.jobs
    assert (train.resources.get("gpu"), etl.resources.get("gpu")) == (1, 0)   # `gpus:` is gpu
    assert train.constraints == ("gpu.model=H100",)


@pytest.mark.parametrize("fairness", ["drf", "hdrf", "mch"])
@pytest.mark.parametrize("placement", ["anbf", "first-fit", "worst-fit", "tetris"])
def test_drf_dominant_shares_match_the_hand_computation(capsys: pytest.CaptureFixture[str], fairness: str,
                                                        placement: str) -> None:
    k, ml_share, etl_share = hand_computation()
    assert (k, ml_share, etl_share) == (6, Fraction(3, 4), Fraction(3, 4))
    report = run_json(capsys, "sim", SCENARIO, "--fairness", fairness, "--placement", placement)
    assert [(j["name"], j["tasks_running"]) for j in report["jobs"]] == [("train", k), ("etl", k)]
    assert [j["dominant_share"] for j in report["jobs"]] == pytest.approx([float(ml_share), float(etl_share)])
    queues = {q["path"]: q["dominant_share"] for q in report["metrics"]["queues"]}
    assert queues == pytest.approx({"ml": 0.75, "etl": 0.75})
    util = report["metrics"]["utilization"]
    assert util == pytest.approx({"cpu": 1.0, "memory": 2 * k * 4 / 128, "gpu": k / 8})
    assert sum(n["free"]["gpu"] for n in report["nodes"]) == 8 - k
    assert all(n["free"]["cpu"] == 0 for n in report["nodes"])


def test_the_sim_table_shows_gpus_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", SCENARIO, "--fairness", "drf"]) == 0
    table = capsys.readouterr().out.splitlines()
    head = next(line for line in table if line.startswith("NODE"))
    assert head.split()[-3:] == ["GPU", "FREE", "GPU"]
    assert table[table.index(head) + 1].split()[-2:] == ["4", "1"]


def test_pack_reports_gpu_utilization_in_arrival_order(capsys: pytest.CaptureFixture[str]) -> None:
    """By hand: train first takes 4 GPUs and 4 cores per node; etl fits 2 per node in the 8
    cores left. 12 of 40 placed; cpu 20/24, gpu 8/8."""
    report = run_json(capsys, "pack", SCENARIO, "--metrics", "util", "--placement", "anbf,first-fit")
    for result in report["results"]:
        assert result["pending"] == 28
        assert result["utilization"] == pytest.approx({"cpu": 20 / 24, "memory": 12 * 4 / 128, "gpu": 1.0})
    assert main(["pack", SCENARIO, "--metrics", "util", "--placement", "anbf"]) == 0
    assert "cpu/memory/gpu" in capsys.readouterr().out


def test_pack_of_a_cluster_without_gpus_reports_cpu_and_memory_only(capsys: pytest.CaptureFixture[str]) -> None:
    drf = str(Path(SCENARIO).with_name("drf-example.yaml"))
    report = run_json(capsys, "pack", drf, "--metrics", "util", "--placement", "anbf")
    assert set(report["results"][0]["utilization"]) == {"cpu", "memory"}


PREEMPTION = """\
nodes:
  - {count: 2, name_prefix: gpu, capacity: {cpu: 12, memory: 64Gi, gpu: 4}}
queues:
  ml: {weight: 1}
  etl: {weight: 1}
preemption: {after_s: 30, grace_s: 30, min_runtime_s: 60, max_per_round: 10}
jobs:
  - {name: etl, queue: etl, submit: 0, tasks: 20, resources: {cpu: 3, memory: 4Gi}, duration: null}
  - {name: train, queue: ml, submit: 100, tasks: 20, resources: {cpu: 1, memory: 4Gi, gpus: 1}, duration: null}
"""


@pytest.mark.parametrize("fairness", ["drf", "hdrf", "mch"])
def test_preemption_takes_back_cpus_for_the_gpu_queue_up_to_its_guaranteed_share(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, fairness: str) -> None:
    """By hand: etl arrives first and takes all 24 cores (8 tasks, dominant share 1). ml's
    guaranteed share is 1/2; its tasks' dominant resource is gpu (1/8 a task), so it is owed
    4 tasks: 4 cores on one node with 4 free GPUs. Taking 4 cores back from etl costs 2 of
    its 3-core tasks there; etl keeps 6 (18/24 = 0.75, above its own 1/2). Without
    preemption ml gets nothing."""
    path = tmp_path / "gpu-preemption.yaml"
    path.write_text(PREEMPTION)
    report = run_json(capsys, "sim", str(path), "--fairness", fairness, "--preemption", "--until", "1000")
    assert [(j["name"], j["tasks_running"]) for j in report["jobs"]] == [("etl", 6), ("train", 4)]
    assert [j["dominant_share"] for j in report["jobs"]] == pytest.approx([0.75, 0.5])
    assert report["metrics"]["preemptions"] == 2
    none = run_json(capsys, "sim", str(path), "--fairness", fairness, "--until", "1000")
    assert [(j["name"], j["tasks_running"]) for j in none["jobs"]] == [("etl", 8), ("train", 0)]
