"""`tcl sim`: the published cases end to end through the CLI, the output contract, the
timeline and plot, reservations, and scenario errors that name the path and line."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from tcluster.cli.main import main
from tcluster.sim.engine import simulate
from tcluster.sim.scenario import parse_scenario
from tcluster.scheduler.yamlsrc import YamlConfigError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FIGURE4_PAPER = [0.33, 0.5, 0.165, 0.165, 0.5, 0.33]


def sim_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["sim", *args, "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def shares(report: dict[str, Any]) -> list[float]:
    return [job["dominant_share"] for job in report["jobs"]]


@pytest.mark.parametrize("policy", ["drf", "hdrf", "mch"])
def test_drf_papers_example_through_tcl_sim(capsys: pytest.CaptureFixture[str], policy: str) -> None:
    report = sim_json(capsys, str(EXAMPLES / "drf-example.yaml"), "--fairness", policy)
    assert [(j["name"], j["tasks_running"]) for j in report["jobs"]] == [("a", 3), ("b", 2)]
    assert shares(report) == pytest.approx([2 / 3, 2 / 3])
    node = report["nodes"][0]
    # 18G and 4G: powers of 1024, as Slurm's G (the paper's ratios hold either way)
    assert node == {"name": "n1", "capacity": {"cpu": 9.0, "memory": 18 * 2**30},
                    "free": {"cpu": 0.0, "memory": 4 * 2**30}}


def test_figure4_shares_weights_and_the_departure_of_n12(capsys: pytest.CaptureFixture[str]) -> None:
    scenario = str(EXAMPLES / "mch-figure4.yaml")
    active = sim_json(capsys, scenario, "--until", "500")
    assert shares(active) == pytest.approx(FIGURE4_PAPER, abs=0.006)   # one task is 0.005
    assert list(active["metrics"]["flattened_weights"].values()) == pytest.approx([1, 1, 0.5, 0.5, 1, 1])
    assert active["metrics"]["first_saturated"] == "cpu" and active["metrics"]["time"] == 500
    after = sim_json(capsys, scenario, "--until", "1000")
    n12 = after["jobs"][1]
    assert n12["tasks_done"] == 100 and n12["tasks_running"] == 0 and n12["dominant_share"] == 0
    assert all(p["end"] == 790 for p in n12["placements"])
    assert after["jobs"][4]["dominant_share"] == pytest.approx(1.0)          # n2,3 takes all the memory
    others = [s for i, s in enumerate(shares(after)) if i not in (1, 4)]
    assert others == pytest.approx([s for i, s in enumerate(shares(active)) if i not in (1, 4)], abs=0.006)


def test_flat_drf_splits_figure4_without_the_departments(capsys: pytest.CaptureFixture[str]) -> None:
    report = sim_json(capsys, str(EXAMPLES / "mch-figure4.yaml"), "--until", "500", "--fairness", "drf")
    assert shares(report) == pytest.approx([0.25, 0.5, 0.25, 0.25, 0.5, 0.25], abs=0.006)


def test_output_contract_and_the_end_of_a_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "nodes: [{count: 2, name_prefix: w, capacity: {cpu: 2, memory: 1Gi}}]\n"
        "jobs:\n  - {name: short, submit: 5, tasks: 3, resources: {cpu: 1, memory: 256Mi}, duration: 10}\n")
    report = sim_json(capsys, str(tmp_path / "s.yaml"), "--placement", "first-fit")
    assert set(report) == {"jobs", "nodes", "metrics"}
    job = report["jobs"][0]
    assert set(job) == {"name", "queue", "tasks_total", "tasks_running", "tasks_done", "dominant_share", "placements",
                        "state", "submitted", "released", "started", "ended", "reason", "tasks_failed", "max_running"}
    assert (job["state"], job["started"], job["ended"], job["released"], job["reason"]) == ("SUCCEEDED", 5, 15, None, "")
    assert job["queue"] == "default" and job["tasks_done"] == 3 and job["tasks_running"] == 0
    assert job["placements"] == [{"task": 0, "node": "w1", "start": 5.0, "end": 15.0},
                                 {"task": 1, "node": "w1", "start": 5.0, "end": 15.0},
                                 {"task": 2, "node": "w2", "start": 5.0, "end": 15.0}]
    assert report["metrics"]["time"] == 15 and report["nodes"][1]["free"]["memory"] == 2**30
    running = sim_json(capsys, str(tmp_path / "s.yaml"), "--placement", "first-fit", "--until", "12")
    assert running["jobs"][0]["tasks_running"] == 3 and running["jobs"][0]["placements"][0]["end"] is None
    assert running["nodes"][0]["free"] == {"cpu": 0.0, "memory": 2**29}


def test_timeline_csv_and_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    csv_path, png_path = tmp_path / "f4.csv", tmp_path / "f4.png"
    assert main(["sim", str(EXAMPLES / "mch-figure4.yaml"), "--until", "1000",
                 "--timeline", str(csv_path), "--plot", str(png_path)]) == 0
    assert "n2_3" in capsys.readouterr().out
    rows = list(csv.reader(csv_path.open()))
    assert rows[0] == ["time", "n1_1", "n1_2", "n2_1", "n2_2", "n2_3", "n3_1"]
    by_time = {float(r[0]): [float(x) for x in r[1:]] for r in rows[1:]}
    assert by_time[790.0][4] == 1.0 and by_time[1000.0] == by_time[790.0]
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png_path.stat().st_size > 10_000


STARVING = """\
reserve_after_s: {after}
nodes: [{{name: n1, capacity: {{cpu: 4, memory: 4Gi}}}}]
jobs:
  - {{name: s0, submit: 0.0, tasks: 1000, resources: {{cpu: 1, memory: 1Mi}}, duration: 10}}
  - {{name: s1, submit: 2.5, tasks: 1000, resources: {{cpu: 1, memory: 1Mi}}, duration: 10}}
  - {{name: s2, submit: 5.0, tasks: 1000, resources: {{cpu: 1, memory: 1Mi}}, duration: 10}}
  - {{name: s3, submit: 7.5, tasks: 1000, resources: {{cpu: 1, memory: 1Mi}}, duration: 10}}
  - {{name: big, submit: 8, tasks: 1, resources: {{cpu: 4, memory: 1Mi}}, duration: 10}}
"""


@pytest.mark.parametrize("policy, latest", [
    ("drf", 8 + 30 + 10), ("hdrf", 8 + 30 + 10), ("mch", 8 + 30 + 10),
    ("fifo", 80),   # FIFO starves s1..s3 too; they waited longer, so their holds come first
])
def test_a_big_task_gets_a_node_held_instead_of_starving(policy: str, latest: float) -> None:
    def big_start(after: float) -> float | None:
        run = simulate(parse_scenario(STARVING.format(after=after), "s"), policy, "first-fit", until=300)
        runs = next(t for t in run.tracks if t.spec.name == "big").runs
        return runs[0].start if runs else None
    assert big_start(after=10**9) is None   # every round the older small jobs win the ties and fill the node
    start = big_start(after=30)
    assert start is not None and 38 <= start <= latest


@pytest.mark.parametrize("text, where", [
    ("nodes: []\njobs: [{name: a, resources: {cpu: 1}}]\n", "s.yaml:1: nodes: must be a non-empty list"),
    ("nodes: [{name: n, capacity: {cpu: 1}}]\njobs:\n  - {name: a, resources: {cpu: 1}}\n  - {name: b, resources: {cpu: 1}}\n"
     "  - {name: c, resources: {cpu: 1}}\n  - {name: d, resources: {cpu: lots}}\n",
     "s.yaml:6: jobs[3].resources.cpu: cannot parse 'lots'"),
    ("nodes: [{name: n, capacity: {cpu: 1}}]\njobs:\n  - {name: a, resources: {cpu: 2}}\n",
     "s.yaml:3: jobs[0].resources.cpu: each task asks for 2"),
    ("nodes: [{name: n, capacity: {cpu: 1}}]\nqueues: {a: {queues: {b: {}}}}\njobs:\n  - {name: x, queue: a, resources: {cpu: 1}}\n",
     "s.yaml:4: jobs[0].queue: 'a' is not a leaf queue; submit to one of: a.b"),
    ("nodes: [{name: n, capacity: {cpu: 1}}]\njobs:\n  - {name: a, resources: {cpu: 1}, duration: 0}\n",
     "s.yaml:3: jobs[0].duration: 0 must be > 0"),
    ("nodes: [{name: n, capacity: {cpu: 1}}]\njobs:\n  - {name: a, resources: {cpu: 1}}\n  - {name: a, resources: {cpu: 1}}\n",
     "s.yaml:4: jobs[1].name: duplicate job name 'a' (also jobs[0])"),
    ("nodes:\n  - {count: 2, name_prefix: n, capacity: {cpu: 1}}\n  - {name: n1, capacity: {cpu: 1}}\njobs: [{name: a, resources: {cpu: 1}}]\n",
     "s.yaml:3: nodes[1]: duplicate node name 'n1' (also nodes[0])"),
    ("nodes: [{name: n, capacity: {cpu: 1}, gpus: 2}]\njobs: [{name: a, resources: {cpu: 1}}]\n",
     "nodes[0].gpus: unknown key"),
    ("nodes: [{name: n, capacity: {cpu: 1}}]\njobs: [{name: a, resources: {cpu: 1}, tasks: 0}]\n",
     "jobs[0].tasks: 0 must be a whole number >= 1"),
    ("nodes: [{name: n, capacity: {cpu: 1}}]\nqueues: {a: {weight: -1}}\njobs: [{name: a, queue: a, resources: {cpu: 1}}]\n",
     "s.yaml:2: queues.a.weight: -1 must be > 0"),
])
def test_scenario_errors_name_the_path_and_the_line(text: str, where: str) -> None:
    with pytest.raises(YamlConfigError) as caught:
        parse_scenario(text, "s.yaml")
    assert where in str(caught.value)


def test_a_bad_scenario_or_policy_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("nodes: [{name: n, capacity: {cpu: 1}}]\njobs: [{name: a, resources: {cpu: x}}]\n")
    assert main(["sim", str(tmp_path / "bad.yaml")]) == 2
    assert "bad.yaml:2: jobs[0].resources.cpu" in capsys.readouterr().err
    assert main(["sim", str(EXAMPLES / "drf-example.yaml"), "--fairness", "lottery"]) == 2
    assert "unknown policy 'lottery'" in capsys.readouterr().err
