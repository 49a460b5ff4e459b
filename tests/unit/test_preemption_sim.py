"""Preemption in `tcl sim` (sim/preempting.py): the issue's two-department case, the
requeue bookkeeping, determinism, the scenario key and the CLI comparison; then
Hypothesis over random queue trees and workloads run through the simulator:

(a) no task is preempted by a job that it could in turn preempt: right after a
    round's swaps every victim's queue is still at or above its target, by the
    planner's standings (held + claimed against min(guarantee, demand)), so it is not
    starved and reclaims nothing back;
(b) every queue with demand reaches >= 0.9 x its target within after_s + grace_s + one
    round, where that holds (see the test);
(c) a task is preempted again only after a change of demand (a submission or a task's
    own end) since its previous preemption, so preemptions per task are bounded by the
    demand changes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings, strategies as st

from tcluster.cli.main import main
from tcluster.scheduler.nodestate import resource_vector
from tcluster.scheduler.preemption import PreemptionInput, PreemptionPlan, PreemptionSettings
from tcluster.scheduler.queues import parse_queue_text
from tcluster.scheduler.yamlsrc import YamlConfigError
from tcluster.sim.engine import SimRun, Simulator, simulate
from tcluster.sim.preempting import TICK_S
from tcluster.sim.preemption_report import episodes, summarize, thrash
from tcluster.sim.scenario import Scenario, parse_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EPS = 1e-9

TWO = """
nodes: [{name: n1, capacity: {cpu: 2, memory: 8Gi}}]
queues: {a: {weight: 1%s}, b: {weight: 1}}
jobs:
  - {name: ja, queue: a, submit: 0, tasks: 4, resources: {cpu: 0.5, memory: 1Gi}, duration: 600}
  - {name: jb, queue: b, submit: 100, tasks: 2, resources: {cpu: 0.5, memory: 1Gi}, duration: 300}
"""


def runs_of(run: SimRun, job: str) -> list[tuple[int, float, float | None, bool]]:
    track = next(t for t in run.tracks if t.spec.name == job)
    return [(r.task, r.start, r.end, r.preempted) for r in track.runs]


def test_two_departments_reach_half_after_the_delay_and_the_grace() -> None:
    """The issue's case: b waits from 100, reclaims at 130, its tasks start at 160; a's
    two victims are requeued and run their whole 600 s again once b's tasks end."""
    run = simulate(parse_scenario(TWO % "", "two"), "mch", "first-fit", preemption=PreemptionSettings())
    assert runs_of(run, "jb") == [(0, 160.0, 460.0, False), (1, 160.0, 460.0, False)]
    assert sorted(runs_of(run, "ja")) == [(0, 0.0, 160.0, True), (0, 460.0, 1060.0, False),
                                          (1, 0.0, 160.0, True), (1, 460.0, 1060.0, False),
                                          (2, 0.0, 600.0, False), (3, 0.0, 600.0, False)]
    assert run.counters["preemptions"] == 2 and run.counters["tasks_requeued"] == 2
    log = run.preemption.log   # type: ignore[union-attr]
    assert [(p.decided_at, p.ended_at, p.lost_cpu_s, p.by_queue) for p in log] == [(130.0, 160.0, 80.0, "b")] * 2


def test_without_preemption_b_waits_for_a_to_end() -> None:
    run = simulate(parse_scenario(TWO % "", "two"), "mch", "first-fit")
    assert runs_of(run, "jb") == [(0, 600.0, 900.0, False), (1, 600.0, 900.0, False)]
    assert "preemptions" not in run.counters


def test_a_protected_queue_is_never_preempted() -> None:
    run = simulate(parse_scenario(TWO % ", preemptable: false", "two"), "mch", "first-fit",
                   preemption=PreemptionSettings())
    assert run.counters["preemptions"] == 0 and runs_of(run, "jb")[0][1] == 600.0


def test_a_victim_that_ends_within_its_grace_loses_nothing() -> None:
    text = (TWO % "").replace("duration: 600", "duration: 150")
    run = simulate(parse_scenario(text, "two"), "mch", "first-fit", preemption=PreemptionSettings(min_runtime_s=0))
    log = run.preemption.log   # type: ignore[union-attr]
    assert [(p.ended_at, p.lost_cpu_s) for p in log] == [(150.0, 0.0)] * 2
    assert run.counters["tasks_requeued"] == 0 and run.counters["tasks_done"] == 6


def test_the_simulator_is_deterministic_for_a_seed() -> None:
    scenario = parse_scenario((EXAMPLES / "preemption-departments.yaml").read_text(), "departments")
    one, two = (simulate(scenario, "mch", "anbf", 4000, 3, preemption=PreemptionSettings()) for _ in range(2))
    assert one.preemption.decisions == two.preemption.decisions   # type: ignore[union-attr]
    assert [runs_of(one, t.spec.name) for t in one.tracks] == [runs_of(two, t.spec.name) for t in two.tracks]


def test_the_scenario_key_sets_the_knobs_and_names_bad_lines() -> None:
    text = TWO % "" + "preemption: {after_s: 5, grace_s: 0, max_per_round: 3}\n"
    knobs = parse_scenario(text, "s.yaml").preemption
    assert (knobs.after_s, knobs.grace_s, knobs.min_runtime_s, knobs.max_per_round) == (5, 0, 60, 3)
    with pytest.raises(YamlConfigError, match=r"s.yaml:7: preemption.max_per_round: 0 must be a whole number >= 1"):
        parse_scenario(TWO % "" + "preemption: {max_per_round: 0}\n", "s.yaml")
    with pytest.raises(YamlConfigError, match=r"preemption.after: unknown key"):
        parse_scenario(TWO % "" + "preemption: {after: 1}\n", "s.yaml")


def test_episodes_open_below_ninety_percent_and_close_at_it() -> None:
    from tcluster.sim.preempting import QueuePoint as P
    timeline = [(0.0, (P(0.0, 0.5, True),)), (10.0, (P(0.46, 0.5, True),)), (20.0, (P(0.0, 0.5, True),)),
                (50.0, (P(0.45, 0.5, True),)), (60.0, (P(0.1, 0.5, True),))]
    assert [(e.start, e.end) for e in episodes(timeline, ["q"])] == [(0.0, 10.0), (20.0, 50.0), (60.0, None)]
    assert thrash([(1, "j", 0, "a", "b"), (2, "j", 0, "a", "b"), (3, "k", 1, "b", "a")]) == (2, 2, 1, 1)


def test_tcl_sim_compares_the_three_systems(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["sim", str(EXAMPLES / "preemption-departments.yaml"), "--until", "3600", "--preempt-compare"]
    assert main([*args, "-o", "json", "--plot", str(tmp_path / "shares.png")]) == 0
    systems = {s["system"]: s for s in json.loads(capsys.readouterr().out)["systems"]}
    assert list(systems) == ["none", "preemption", "naive"]
    assert systems["none"]["preemptions"] == 0 and systems["preemption"]["preemptions"] > 0
    assert systems["none"]["never"] >= 3 and systems["preemption"]["never"] == 0   # by 3600 s nobody reached
    assert systems["preemption"]["p99_s"] <= 30 + 30 + 5                         # after + grace + a few rounds
    assert (tmp_path / "shares.png").stat().st_size > 0
    assert main([*args, "--preempt-grace-s", "10"]) == 0
    out = capsys.readouterr().out
    assert "grace=10s" in out and "TO SHARE P50" in out and "naive" in out
    assert main(["sim", str(EXAMPLES / "preemption-departments.yaml"), "--until", "1000", "--preempt-naive"]) == 0
    assert "preemptions=" in capsys.readouterr().out.splitlines()[0]


# ---- properties over random trees and workloads ----

@st.composite
def trees(draw: st.DrawFn, protect: bool = True) -> tuple[str, list[str]]:
    """A flat or two-level tree of 2-4 leaves with weights 1-3, maybe a protected leaf."""
    text, leaves = "queues:\n", []
    for i in range(draw(st.integers(2, 3))):
        name, weight = f"q{i}", draw(st.integers(1, 3))
        if draw(st.booleans()) and i == 0:
            kids = [f"k{j}" for j in range(2)]
            body = ", ".join(f"{k}: {{weight: {draw(st.integers(1, 3))}}}" for k in kids)
            text += f"  {name}: {{weight: {weight}, queues: {{{body}}}}}\n"
            leaves += [f"{name}.{k}" for k in kids]
        else:
            flag = ", preemptable: false" if protect and draw(st.integers(0, 4)) == 0 else ""
            text += f"  {name}: {{weight: {weight}{flag}}}\n"
            leaves.append(name)
    return text, leaves


@st.composite
def workloads(draw: st.DrawFn) -> tuple[Scenario, PreemptionSettings]:
    queues, leaves = draw(trees())
    nodes, cpu = draw(st.integers(1, 3)), draw(st.sampled_from([4, 8]))
    lines = []
    for j in range(draw(st.integers(2, 6))):
        duration = draw(st.sampled_from(["null", "200", "700", "1500"]))
        lines.append(f"  - {{name: j{j}, queue: {draw(st.sampled_from(leaves))}, submit: {draw(st.integers(0, 40)) * 20},"
                     f" tasks: {draw(st.integers(1, 12))}, resources: {{cpu: {draw(st.sampled_from([1, 2]))},"
                     f" memory: 1Gi}}, duration: {duration}}}")
    text = (f"nodes: [{{count: {nodes}, name_prefix: n, capacity: {{cpu: {cpu}, memory: 64Gi}}}}]\n{queues}"
            "jobs:\n" + "\n".join(lines) + "\n")
    knobs = PreemptionSettings(after_s=draw(st.sampled_from([0.0, 30.0])), grace_s=draw(st.sampled_from([0.0, 30.0])),
                               min_runtime_s=draw(st.sampled_from([0.0, 60.0])), max_per_round=draw(st.integers(1, 10)))
    return parse_scenario(text, "generated"), knobs


def standings_after(inp: PreemptionInput, plan: PreemptionPlan) -> dict[str, tuple[float, float]]:
    """Per queue, (share, target) after the round's swaps, as the planner reckons them:
    usage = held + claimed (earlier claims and this round's) - victims; target =
    min(guarantee, demand), demand counting the victims' requeued tasks too."""
    view = inp.view
    inverse = 1.0 / view.capacity[view.schedulable].sum(axis=0)
    zero = np.zeros(len(view.kinds))
    usage = {q: resource_vector(r, view.kinds) for q, r in inp.held.items()}
    demand = {q: v.copy() for q, v in usage.items()}
    request = {j.job_id: (j.queue, resource_vector(j.request, view.kinds)) for j in inp.waiting}
    claimed: dict[str, int] = {}
    for claim in (*inp.claims, *plan.claims):
        claimed[claim.job_id] = claimed.get(claim.job_id, 0) + claim.count
    for job in inp.waiting:
        queue, vector = request[job.job_id]
        usage[queue] = usage.get(queue, zero) + vector * claimed.get(job.job_id, 0)
        demand[queue] = demand.get(queue, zero) + vector * max(job.pending, claimed.get(job.job_id, 0))
    tasks = {t.task_id: t for node in view.names if node for t in inp.running_on(node)}
    for victim in plan.victims:
        usage[victim.queue] = usage[victim.queue] - tasks[victim.task_id].demand   # its room is leaving
        # its demand stays: held now, requeued after its grace
    share = lambda v: float(np.max(v * inverse, initial=0.0))   # noqa: E731
    return {q: (share(usage[q]), min(inp.tree.guaranteed_share(q), share(demand[q]))) for q in usage}


def run_observed(scenario: Scenario, knobs: PreemptionSettings, until: float) -> tuple[SimRun, list]:
    sim = Simulator(scenario, "mch", "first-fit", 0, None, knobs)
    seen: list[tuple[float, PreemptionInput, PreemptionPlan, dict]] = []

    def observe(now: float, inp: PreemptionInput, plan: PreemptionPlan) -> None:
        if plan.victims:   # running_on reads live state: take the standings now
            seen.append((now, inp, plan, standings_after(inp, plan)))
    sim.preemption.observer = observe   # type: ignore[union-attr]
    return sim.run(until), seen


FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(workloads())
def test_a_victims_queue_is_never_left_below_its_target(case: tuple[Scenario, PreemptionSettings]) -> None:
    scenario, knobs = case
    _, seen = run_observed(scenario, knobs, 3000)
    event(f"rounds with victims: {'some' if seen else 'none'}")   # --hypothesis-show-statistics
    for now, _, plan, after in seen:
        for victim in plan.victims:
            share, target = after[victim.queue]
            assert share >= target - EPS, (now, victim, after)
            assert victim.queue != victim.by_queue


@FAST
@given(workloads())
def test_c_a_task_is_preempted_again_only_after_demand_changed(case: tuple[Scenario, PreemptionSettings]) -> None:
    scenario, knobs = case
    run, _ = run_observed(scenario, knobs, 3000)
    changes = sorted([j.submit for j in scenario.jobs]
                     + [r.end for t in run.tracks for r in t.runs if r.end is not None and not r.preempted])
    last: dict[tuple[str, int], float] = {}
    event(f"re-preempted tasks: {thrash(run.preemption.decisions)[2] > 0}")   # type: ignore[union-attr]
    for time, job, task, _, _ in run.preemption.decisions:   # type: ignore[union-attr]
        if (job, task) in last:
            assert any(last[(job, task)] < c <= time for c in changes), (job, task, last[(job, task)], time)
        last[(job, task)] = time   # so a task's preemptions <= 1 + the demand changes after its first


@st.composite
def waves(draw: st.DrawFn) -> tuple[Scenario, PreemptionSettings, float, int]:
    """The conditions (b) needs, and why: one queue fills the cluster with tasks that run
    until the end; at t=100 other queues (or it) submit jobs as big as the cluster, and
    nothing else changes. All tasks are 1 CPU (no fragmentation), none is exempt by age
    (min_runtime_s 0), no queue is protected, the rate limit lets every victim through in
    one round. Then a starved queue stops short only where each queue above its target
    is less than one task above it (the victim floor) or it is within one task of its
    target (the final-share rule): less than `leaves` tasks short. So the test keeps the
    trees where every target is at least 10 x leaves tasks: 0.9 x target is reached."""
    queues, leaves = draw(trees(protect=False))
    slots = 128
    filler = draw(st.sampled_from(leaves))
    wave = draw(st.lists(st.sampled_from(leaves), min_size=1, max_size=3, unique=True))
    tree = parse_queue_text(queues, "t")
    active = set(wave) | {filler}
    assume(all(tree.guaranteed_share(q) * slots >= 10 * len(leaves) for q in active))
    jobs = [f"  - {{name: fill, queue: {filler}, submit: 0, tasks: {slots}, resources: {{cpu: 1, memory: 1Gi}},"
            " duration: null}"]
    jobs += [f"  - {{name: w{i}, queue: {q}, submit: 100, tasks: {slots}, resources: {{cpu: 1, memory: 1Gi}},"
             " duration: null}" for i, q in enumerate(wave)]
    text = f"nodes: [{{count: 8, name_prefix: n, capacity: {{cpu: 16, memory: 256Gi}}}}]\n{queues}jobs:\n" + \
        "\n".join(jobs) + "\n"
    knobs = PreemptionSettings(after_s=draw(st.sampled_from([0.0, 30.0])), grace_s=draw(st.sampled_from([0.0, 30.0])),
                               min_runtime_s=0.0, max_per_round=slots)
    return parse_scenario(text, "wave"), knobs, 100.0, len(leaves)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(waves())
def test_b_every_queue_reaches_ninety_percent_within_after_grace_and_a_round(case: Any) -> None:
    scenario, knobs, demand_at, _ = case
    deadline = demand_at + knobs.after_s + knobs.grace_s + TICK_S
    run = simulate(scenario, "mch", "first-fit", deadline, 0, preemption=knobs, record_queues=True)
    rec = run.preemption
    _, points = rec.timeline[-1]   # type: ignore[union-attr]
    for queue, point in zip(rec.queues, points):   # type: ignore[union-attr]
        assert point.share >= 0.9 * point.target - EPS, (queue, point, rec.timeline)   # type: ignore[union-attr]
    summary = summarize("preemption", run)
    assert summary.never == 0 and (summary.p99_s or 0.0) <= knobs.after_s + knobs.grace_s + TICK_S
