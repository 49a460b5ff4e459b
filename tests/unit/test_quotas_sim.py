"""Queue quotas in `tcl sim` (the master's round and preemption planner): a Hypothesis
property over random capped trees and workloads that no cap is ever exceeded, with and
without preemption; a queue at its max gains nothing from preemption; the scenario key
`user`."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tcluster.scheduler.preemption import PreemptionSettings
from tcluster.scheduler.yamlsrc import YamlConfigError
from tcluster.sim.engine import SimRun, simulate
from tcluster.sim.scenario import parse_scenario

EPS = 1e-9
LEAVES = ("a.x", "a.y", "b")
NODES = "nodes: [{count: 2, name_prefix: n, capacity: {cpu: 4, memory: 16Gi}}]\n"   # 8 cores, 32 GiB


def _caps(draw: Any) -> dict[str, Any]:
    caps: dict[str, Any] = {}
    if draw(st.booleans()):
        caps["max"] = {"cpu": draw(st.sampled_from([1, 2, 3, 5]))}
    if draw(st.booleans()):
        caps["borrow_limit"] = draw(st.sampled_from([0.0, 0.1, 0.25]))
    if draw(st.booleans()):
        caps["lend_limit"] = draw(st.sampled_from([0.0, 0.2]))
    if draw(st.booleans()):
        caps["max_running_per_user"] = draw(st.integers(1, 4))
    return caps


@st.composite
def scenarios(draw: Any) -> tuple[str, dict[str, dict[str, Any]]]:
    caps = {q: _caps(draw) for q in ("a", "a.x", "b")}

    def body(q: str, extra: str = "") -> str:
        items = [f"{k}: {v}" for k, v in caps[q].items()] + ([extra] if extra else [])
        return "{" + ", ".join(items) + "}"

    queues = f"queues: {{a: {body('a', 'queues: {x: ' + body('a.x') + ', y: {}}')}, b: {body('b')}}}\n"
    jobs = []
    for i in range(draw(st.integers(1, 6))):
        duration = draw(st.sampled_from(["null", "60", "200", "500"]))
        cpu = draw(st.sampled_from([0.5, 1, 2]))
        gang = ", gang: true" if draw(st.integers(0, 4)) == 0 else ""
        user = draw(st.sampled_from(["alice", "bob"]))
        jobs.append(f"  - {{name: j{i}, queue: {draw(st.sampled_from(LEAVES))}, user: {user}, "
                    f"submit: {draw(st.integers(0, 300))}, tasks: {draw(st.integers(1, 6))}, "
                    f"resources: {{cpu: {cpu}, memory: 1Gi}}, duration: {duration}{gang}}}")
    return NODES + queues + "jobs:\n" + "\n".join(jobs) + "\n", caps


def _running_at(run: SimRun, t: float) -> list[tuple[str, str, float]]:
    """(queue, user, cpu) of each task holding room at t (starts at t count, ends at t not)."""
    out = []
    for track in run.tracks:
        for r in track.runs:
            if r.start <= t and (r.end is None or r.end > t):
                out.append((track.spec.queue, track.spec.user, track.spec.resources.cpu))
    return out


def _check(run: SimRun, caps: dict[str, dict[str, Any]]) -> None:
    guarantee = {"a": 0.5, "a.x": 0.25, "b": 0.5}
    starts = sorted({r.start for track in run.tracks for r in track.runs})
    for t in starts:
        running = _running_at(run, t)
        for q, c in caps.items():
            inside = [(u, cpu) for queue, u, cpu in running if queue == q or queue.startswith(q + ".")]
            used = sum(cpu for _, cpu in inside)
            if "max" in c:
                assert used <= c["max"]["cpu"] + EPS, (t, q, used, c)
            if "borrow_limit" in c:
                assert used <= (guarantee[q] + c["borrow_limit"]) * 8 + EPS, (t, q, used, c)
            if "max_running_per_user" in c:
                for user in ("alice", "bob"):
                    assert sum(u == user for u, _ in inside) <= c["max_running_per_user"], (t, q, user, c)


def _check_lending(run: SimRun, caps: dict[str, dict[str, Any]]) -> None:
    """Whenever a task starts outside a lender, the unused part of the lender's kept room
    ((guarantee - lend_limit) x capacity, less what it holds) is still free."""
    guarantee = {"a": 0.5, "a.x": 0.25, "b": 0.5}
    for q, c in caps.items():
        if "lend_limit" not in c:
            continue
        outside = {r.start for t in run.tracks for r in t.runs
                   if not (t.spec.queue == q or t.spec.queue.startswith(q + "."))}
        for t in sorted(outside):
            running = _running_at(run, t)
            used = sum(cpu for queue, _, cpu in running if queue == q or queue.startswith(q + "."))
            kept = max((guarantee[q] - c["lend_limit"]) * 8 - used, 0.0)
            total = sum(cpu for _, _, cpu in running)
            assert total <= 8 - kept + EPS, (t, q, total, kept, c)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.booleans(), st.sampled_from(["mch", "drf"]))
def test_caps_are_never_exceeded(case: tuple[str, dict[str, dict[str, Any]]], preempt: bool, fairness: str) -> None:
    text, caps = case
    settings_ = PreemptionSettings(after_s=10, grace_s=5, min_runtime_s=0) if preempt else None
    run = simulate(parse_scenario(text, "s.yaml"), fairness, "first-fit", until=3000, preemption=settings_)
    _check(run, caps)
    _check_lending(run, caps)


CAPPED = NODES + """queues: {a: {max: {cpu: 2}}, b: {}}
jobs:
  - {name: big, queue: b, user: bob, submit: 0, tasks: 8, resources: {cpu: 1, memory: 1Gi}, duration: null}
  - {name: small, queue: a, user: alice, submit: 10, tasks: 8, resources: {cpu: 1, memory: 1Gi}, duration: null}
"""


def test_preemption_reclaims_up_to_the_max_and_no_further() -> None:
    """a's guarantee is 4 cores but its max is 2: preemption frees 2 cores for it, no more."""
    run = simulate(parse_scenario(CAPPED, "s.yaml"), "mch", "first-fit", until=600,
                   preemption=PreemptionSettings(after_s=10, grace_s=5, min_runtime_s=0))
    small = next(t for t in run.tracks if t.spec.name == "small")
    assert len(small.running) == 2
    assert run.counters["preemptions"] == 2


def test_a_queue_at_max_preempts_nothing() -> None:
    text = CAPPED.replace("{a: {max: {cpu: 2}}", "{a: {max: {cpu: 0.5}}")
    run = simulate(parse_scenario(text, "s.yaml"), "mch", "first-fit", until=600,
                   preemption=PreemptionSettings(after_s=10, grace_s=5, min_runtime_s=0))
    assert run.counters["preemptions"] == 0


def test_the_user_key_is_checked() -> None:
    with pytest.raises(YamlConfigError, match=r"s.yaml:3: jobs\[0\].user: 5 must be a user name"):
        parse_scenario(NODES + "jobs:\n  - {name: j, user: 5, resources: {cpu: 1}, duration: 1}\n", "s.yaml")
