"""`tcl sim` with batch work: arrays and their throttle, dependencies by scenario job name
(order, unmet -> cancelled with the reason, or-lists, keep_unmet), gangs all at once,
time limits, scenario errors naming line and path, and the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tcluster.cli.main import main
from tcluster.scheduler.preemption import PreemptionSettings
from tcluster.scheduler.yamlsrc import YamlConfigError
from tcluster.sim.engine import SimRun, simulate
from tcluster.sim.report import to_json
from tcluster.sim.scenario import load_scenario, parse_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NODES = "nodes: [{count: 4, name_prefix: n, capacity: {cpu: 4, memory: 16Gi}}]\njobs:\n"


def run_jobs(*jobs: str, seed: int = 0, preemption: PreemptionSettings | None = None) -> dict[str, Any]:
    scenario = parse_scenario(NODES + "".join(f"  - {j}\n" for j in jobs), "s.yaml")
    return report_of(simulate(scenario, "mch", "anbf", seed=seed, preemption=preemption), scenario)


def report_of(run: SimRun, scenario: Any) -> dict[str, Any]:
    report = to_json(run, scenario, "mch", "anbf")
    report["by_name"] = {j["name"]: j for j in report["jobs"]}
    return report


def most_at_once(job: dict[str, Any]) -> int:
    """The most tasks running at once, from the placements (an end before a start at equal times)."""
    points = sorted([(p["start"], 1) for p in job["placements"]] +
                    [(p["end"], -1) for p in job["placements"] if p["end"] is not None])
    running = most = 0
    for _, step in points:
        running += step
        most = max(most, running)
    return most


def scenario_error(text: str) -> str:
    with pytest.raises(YamlConfigError) as caught:
        parse_scenario(NODES + text, "s.yaml")
    return str(caught.value)


# ---- the example pipeline ----

def test_the_example_pipeline_runs_in_order_and_cancels_what_cannot_run() -> None:
    scenario = load_scenario(EXAMPLES / "batch-pipeline.yaml")
    report = report_of(simulate(scenario, "mch", "anbf", seed=0), scenario)
    jobs = report["by_name"]
    assert jobs["prep"]["ended"] == 120
    sweep = jobs["sweep"]
    assert sweep["released"] == 120 and sweep["started"] == 120 and sweep["state"] == "SUCCEEDED"
    assert sorted(p["task"] for p in sweep["placements"]) == list(range(1000))   # every index once
    assert most_at_once(sweep) == sweep["max_running"] == 50                        # %50, with room for 128
    assert sweep["ended"] == 120 + 1000 // 50 * 60 and sweep["array"] == "0-999%50"
    train = jobs["train"]
    assert {p["start"] for p in train["placements"]} == {sweep["ended"]} and len(train["placements"]) == 64
    assert jobs["report"]["started"] == train["ended"] and jobs["report"]["state"] == "SUCCEEDED"
    assert jobs["cleanup"]["state"] == "CANCELLED" and jobs["cleanup"]["placements"] == []
    assert jobs["cleanup"]["ended"] == sweep["ended"]
    assert jobs["cleanup"]["reason"] == "dependency can no longer be met: afternotok:sweep (SUCCEEDED)"
    assert jobs["audit"]["state"] == "FAILED" and jobs["audit"]["ended"] == 1200
    assert all(p["reason"] == "TimeLimit" and p["end"] == 1200 for p in jobs["audit"]["placements"])
    assert jobs["publish"]["reason"] == "dependency can no longer be met: afterok:audit (FAILED)"
    metrics = report["metrics"]
    assert (metrics["jobs_cancelled"], metrics["tasks_failed"]) == (2, 2)


def test_a_run_is_the_same_for_a_seed() -> None:
    scenario = load_scenario(EXAMPLES / "batch-pipeline.yaml")
    first, again = (json.dumps(to_json(simulate(scenario, "mch", "anbf", seed=7), scenario, "mch", "anbf"))
                    for _ in range(2))
    assert first == again


def test_the_table_gives_states_times_and_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", str(EXAMPLES / "batch-pipeline.yaml")]) == 0
    out = capsys.readouterr().out
    assert "failed=2  cancelled=2" in out.splitlines()[0]
    assert "STATE" in out and "STARTED" in out and "0-999%50" in out
    assert "publish: dependency can no longer be met: afterok:audit (FAILED)" in out


# ---- arrays ----

@pytest.mark.parametrize("throttle", [1, 3, 7])
def test_an_array_never_runs_more_than_its_throttle(throttle: int) -> None:
    jobs = run_jobs("{name: a, array: '0-99:3%" + str(throttle) + "', resources: {cpu: 1, memory: 1Gi}, duration: 5}",
                    "{name: other, tasks: 20, resources: {cpu: 1, memory: 1Gi}, duration: 7}")["by_name"]
    a = jobs["a"]
    assert most_at_once(a) == a["max_running"] == throttle
    assert sorted(p["task"] for p in a["placements"]) == list(range(0, 100, 3))
    assert a["tasks_total"] == 34 and a["tasks_done"] == 34 and a["state"] == "SUCCEEDED"


def test_an_array_without_a_throttle_fills_the_cluster_from_its_smallest_index() -> None:
    a = run_jobs("{name: a, array: '5-9,20-99', resources: {cpu: 1, memory: 1Gi}, duration: 5}")["by_name"]["a"]
    assert most_at_once(a) == 16
    assert [p["task"] for p in a["placements"][:8]] == [5, 6, 7, 8, 9, 20, 21, 22]


def test_a_preempted_array_task_is_requeued_and_runs_again() -> None:
    settings = PreemptionSettings(after_s=1, grace_s=1, min_runtime_s=0)
    report = run_jobs("{name: a, queue: default, array: '0-63', resources: {cpu: 1, memory: 1Gi}, duration: 50}",
                      seed=1, preemption=settings)
    a = report["by_name"]["a"]
    assert sorted({p["task"] for p in a["placements"]}) == list(range(64)) and a["tasks_done"] == 64


# ---- dependencies ----

def test_an_unmet_dependency_cancels_down_the_chain_and_afterany_still_runs() -> None:
    jobs = run_jobs(
        "{name: first, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: 100, time_limit: 10}",
        "{name: second, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: 5, dependency: 'afterok:first'}",
        "{name: third, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: 5, dependency: 'afterok:second'}",
        "{name: always, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: 5, dependency: 'afterany:second'}",
        "{name: on-fail, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: 5, dependency: 'afternotok:first'}",
    )["by_name"]
    assert jobs["first"]["state"] == "FAILED" and jobs["first"]["ended"] == 10
    assert (jobs["second"]["state"], jobs["second"]["ended"]) == ("CANCELLED", 10)
    assert jobs["second"]["reason"] == "dependency can no longer be met: afterok:first (FAILED)"
    assert jobs["third"]["reason"] == "dependency can no longer be met: afterok:second (CANCELLED)"
    assert jobs["always"]["started"] == 10 and jobs["always"]["state"] == "SUCCEEDED"
    assert jobs["on-fail"]["started"] == 10 and jobs["on-fail"]["state"] == "SUCCEEDED"


def test_or_dependencies_and_keep_unmet() -> None:
    jobs = run_jobs(
        "{name: bad, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: 50, time_limit: 1}",
        "{name: good, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: 20}",
        "{name: either, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: 5, dependency: 'afterok:bad?afterok:good'}",
        "{name: kept, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: 5, dependency: 'afterok:bad',"
        " keep_unmet: true}",
    )["by_name"]
    assert jobs["either"]["released"] == 20 and jobs["either"]["started"] == 20
    kept = jobs["kept"]
    assert kept["state"] == "PENDING" and kept["placements"] == [] and kept["ended"] is None
    assert kept["reason"] == "dependency can no longer be met: afterok:bad (FAILED) (kept: keep_unmet)"


def test_a_dependency_on_a_job_that_ended_before_the_submit_is_decided_at_the_submit() -> None:
    jobs = run_jobs(
        "{name: early, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: 5}",
        "{name: late, submit: 100, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: 5, dependency: 'afterok:early'}",
        "{name: never, submit: 100, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: 5,"
        " dependency: 'afternotok:early'}",
    )["by_name"]
    assert (jobs["late"]["released"], jobs["late"]["started"]) == (100, 100)
    assert (jobs["never"]["state"], jobs["never"]["ended"]) == ("CANCELLED", 100)


def test_a_job_still_waiting_at_the_end_says_on_what() -> None:
    jobs = run_jobs(
        "{name: forever, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: null}",
        "{name: after, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: 5, dependency: 'afterok:forever'}",
    )["by_name"]
    assert jobs["after"]["state"] == "PENDING"
    assert jobs["after"]["reason"] == "waiting for dependency: afterok:forever (RUNNING)"


# ---- gangs and time limits ----

def test_a_gang_starts_all_at_once_when_all_fit() -> None:
    jobs = run_jobs("{name: filler, tasks: 12, resources: {cpu: 1, memory: 1Gi}, duration: 100}",
                    "{name: gang, submit: 1, tasks: 8, gang: true, resources: {cpu: 1, memory: 1Gi}, duration: 10}",
                    "{name: loose, submit: 1, tasks: 8, resources: {cpu: 1, memory: 1Gi}, duration: 10}")["by_name"]
    starts = [p["start"] for p in jobs["gang"]["placements"]]
    assert len(starts) == 8 and len(set(starts)) == 1   # all in one round
    assert starts[0] >= 100                               # 4 free CPUs at t=1 are not enough for 8
    assert min(p["start"] for p in jobs["loose"]["placements"]) == 1   # an ordinary job takes what is there


def test_a_time_limit_ends_a_task_that_would_run_forever() -> None:
    job = run_jobs("{name: t, tasks: 2, resources: {cpu: 1, memory: 1Gi}, duration: null, time_limit: 2m}")["by_name"]["t"]
    assert job["state"] == "FAILED" and job["tasks_failed"] == 2 and job["ended"] == 120
    assert all(p["reason"] == "TimeLimit" for p in job["placements"])


def test_a_task_within_its_limit_succeeds() -> None:
    job = run_jobs("{name: t, tasks: 1, resources: {cpu: 1, memory: 1Gi}, duration: 60, time_limit: 60}")["by_name"]["t"]
    assert job["state"] == "SUCCEEDED" and "reason" not in job["placements"][0]


# ---- scenario errors name the line and the path ----

R = "resources: {cpu: 1, memory: 1Gi}"


@pytest.mark.parametrize(("jobs", "expected"), [
    (f"  - {{name: a, {R}}}\n  - {{name: b, {R}, dependency: 'afterok:nope'}}\n",
     "s.yaml:4: jobs[1].dependency: names 'nope', which is no job of this scenario (jobs: a, b)"),
    (f"  - {{name: a, {R}, dependency: 'afterok:c'}}\n  - {{name: b, {R}, dependency: 'afterany:a'}}\n"
     f"  - {{name: c, {R}, dependency: 'afterok:b'}}\n",
     "s.yaml:3: jobs[0].dependency: a cycle: a -> c -> b -> a"),
    (f"  - {{name: a, {R}, dependency: 'afterok:a'}}\n", "s.yaml:3: jobs[0].dependency: a cycle: a -> a"),
    (f"  - {{name: a, {R}, dependency: 'after:b'}}\n", "s.yaml:3: jobs[0].dependency: 'after:b' is not KIND:JOB"),
    (f"  - {{name: a, {R}, array: '0-9%0'}}\n", "s.yaml:3: jobs[0].array: %0 must be %N with N in 1..100,000,000"),
    (f"  - {{name: a, {R}, array: '0-9', tasks: 3}}\n", "s.yaml:3: jobs[0].array: give `array` or `tasks`"),
    (f"  - {{name: a, {R}, array: '0-9', gang: true}}\n", "s.yaml:3: jobs[0].array: an array's tasks cannot be a gang"),
    (f"  - {{name: a, {R}, gang: 'yes'}}\n", "s.yaml:3: jobs[0].gang: 'yes' must be true or false"),
    (f"  - {{name: a, {R}, time_limit: soon}}\n", "s.yaml:3: jobs[0].time_limit: cannot parse 'soon' as a duration"),
])
def test_scenario_errors_name_the_line_and_the_path(jobs: str, expected: str) -> None:
    assert scenario_error(jobs).startswith(expected)
