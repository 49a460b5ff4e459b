"""`tcl sim` with generated workloads (Tran et al., section 5.4), small: the queueing engine,
the comparison output, determinism and the errors of the `workload:` section."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tcluster.cli.main import main
from tcluster.scheduler.yamlsrc import YamlConfigError
from tcluster.sim.compare import compare
from tcluster.sim.queueing import draw_arrivals
from tcluster.sim.scenario import parse_scenario

SMALL = """
nodes:
  - {count: 4, name_prefix: a-, capacity: {cpu: 16, memory: 50Gi}}
  - {count: 4, name_prefix: b-, capacity: {cpu: 32, memory: 100Gi}}
  - {count: 4, name_prefix: c-, capacity: {cpu: 16, memory: 12Gi}}
workload:
  horizon: 2
  load: [0.95]
  generate: {classes: 3, phi: 0.01, omega: 0.3, base: 0.05}
"""


def test_a_generated_comparison_is_deterministic_and_complete() -> None:
    scenario = parse_scenario(SMALL, "s.yaml")
    first, solves, timelines = compare(scenario, ["lotes", "tetris", "first-fit"], [0, 1])
    again, _, _ = compare(scenario, ["lotes", "tetris", "first-fit"], [0, 1])
    assert first == again
    assert [(r.seed, r.policy) for r in first] == [(s, p) for s in (0, 1) for p in ("lotes", "tetris", "first-fit-central")]
    for run in first:
        assert run.arrivals > 100 and run.mean_response >= 0 and 0 <= run.waited_fraction <= 1
        assert run.p50_response <= run.p99_response
    assert all(s.lambda2 <= s.lambda2_lp * (1 + 1e-9) <= s.lambda1 * (1 + 1e-9) for s in solves)
    assert set(timelines) == {"lotes", "tetris", "first-fit-central"}
    # Common random numbers: every policy of a seed saw the same arrivals.
    assert len({r.arrivals for r in first if r.seed == 0}) == 1


def test_arrivals_follow_the_rate_and_the_requests_stay_in_range() -> None:
    scenario = parse_scenario(SMALL, "s.yaml")
    from tcluster.scheduler.lotes.classes import group_configurations

    nodes = [(n.name, n.capacity, dict(n.labels)) for n in scenario.nodes]
    configs = group_configurations(nodes, ("cpu", "memory"))
    largest = np.array([32.0, 100 * 2**30])
    classes = scenario.workload.instance(configs, largest, seed=0)
    arrivals = draw_arrivals(classes, 1000.0, 10.0, 1.0, 0.5, largest, seed=0)
    assert abs(len(arrivals.time) - 10_000) < 400          # Poisson(10,000): 4 standard deviations
    assert (arrivals.request > 0).all() and (arrivals.request <= largest).all()
    assert np.all(np.diff(arrivals.time) >= 0)
    assert abs(arrivals.work.mean() - 1.0) < 0.05


def test_tcl_sim_compares_policies_as_json_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(SMALL)
    plot = tmp_path / "w.png"
    assert main(["sim", str(path), "--compare", "lotes,first-fit", "--seeds", "1", "--plot", str(plot), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in report["runs"]] == ["lotes", "first-fit-central"]
    assert report["solves"][0]["bins"] >= 1 and plot.stat().st_size > 0
    assert main(["sim", str(path), "--compare", "lotes,nope"]) == 2
    assert main(["sim", str(path), "--seeds", "1", "--load", "0.5"]) == 0
    assert "BEST" in capsys.readouterr().out


@pytest.mark.parametrize("workload,where", [
    ("{horizon: 1, load: 0.9, rate: 5, generate: {}}", "workload: give exactly one of `load`"),
    ("{horizon: 1, load: 0.9}", "workload: give exactly one of `classes` or `generate`"),
    ("{horizon: -1, load: 0.9, generate: {}}", "workload.horizon"),
    ("{horizon: 1, load: [0.9, x], generate: {}}", "workload.load[1]"),
    ("{horizon: 1, load: 0.9, generate: {phi: 0.1, base: 0.05}}", "workload.generate.phi"),
    ("{horizon: 1, load: 0.9, generate: {omega: 1.5}}", "workload.generate.omega"),
    ("{horizon: 1, load: 0.9, classes: [{name: a, request: {cpu: 1}, share: 0}]}", "workload.classes[0].share"),
    ("{horizon: 1, load: 0.9, generate: {}, colour: red}", "workload.colour"),
])
def test_workload_errors_name_the_field(workload: str, where: str) -> None:
    text = f"nodes:\n  - {{name: n, capacity: {{cpu: 4, memory: 4Gi}}}}\nworkload: {workload}\n"
    with pytest.raises(YamlConfigError) as info:
        parse_scenario(text, "w.yaml")
    assert where in str(info.value)


def test_placement_lotes_in_the_job_list_simulator_reports_its_plan(capsys: pytest.CaptureFixture[str]) -> None:
    table3 = str(Path(__file__).resolve().parents[2] / "examples" / "tcluster-table3.yaml")
    assert main(["sim", table3, "--fairness", "fifo", "--placement", "lotes", "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["lotes"]["plan"] is True and report["lotes"]["lambda2"] <= report["lotes"]["lambda1"] + 1e-9
    assert report["metrics"]["placement"] == "lotes"


def test_placement_lotes_takes_classes_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table3 = str(Path(__file__).resolve().parents[2] / "examples" / "tcluster-table3.yaml")
    classes = tmp_path / "classes.yaml"
    classes.write_text("classes:\n  - {name: small, request: {cpu: 0.8, memory: 600Mi}, share: 0.5}\n"
                       "  - {name: large, request: {cpu: 2.5, memory: 1200Mi}, share: 0.5}\n")
    assert main(["sim", table3, "--fairness", "fifo", "--placement", "lotes", "--lotes-classes", str(classes),
                 "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["lotes"]["classes"] == ["small", "large"]
    classes.write_text("classes:\n  - {name: small, request: {cpu: 0.8}, share: zero}\n")
    assert main(["sim", table3, "--placement", "lotes", "--lotes-classes", str(classes)]) == 2
    assert "classes[0].share" in capsys.readouterr().err
