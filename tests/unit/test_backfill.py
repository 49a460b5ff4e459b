"""Backfill (scheduler/backfill.py): the estimate, the decision, the round and the
simulator. Tables for the pure parts; a Hypothesis property that backfill never delays
the job a reservation is held for."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tcluster.domain.model import Job, JobSpec, Task, TaskState
from tcluster.domain.resources import Resources
from tcluster.scheduler.backfill import Hold, decide, earliest_start, latest_end, may_backfill
from tcluster.scheduler.fairness import make_fairness
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import make_placement
from tcluster.scheduler.reservations import Reservation, Reservations
from tcluster.scheduler.round import schedule_round
from tcluster.sim.engine import simulate
from tcluster.sim.scenario import parse_scenario

CPU1 = np.array([1.0, 0.0])


def vec(cpu: float) -> np.ndarray:
    return np.array([cpu, 0.0])


@pytest.mark.parametrize("size, free, ends, now, expected", [
    (1, {"a": vec(1)}, {}, 5.0, 5.0),                                          # fits now
    (1, {"a": vec(0)}, {"a": [(30.0, CPU1), (10.0, CPU1)]}, 0.0, 10.0),        # the first end frees enough
    (2, {"a": vec(0)}, {"a": [(30.0, CPU1), (10.0, CPU1)]}, 0.0, 30.0),        # needs both
    (2, {"a": vec(0), "b": vec(0)}, {"a": [(30.0, CPU1)], "b": [(20.0, CPU1)]}, 0.0, 30.0),   # a gang over 2 nodes
    (1, {"a": vec(0), "b": vec(0)}, {"a": [(30.0, CPU1)], "b": [(20.0, CPU1)]}, 0.0, 20.0),
    (1, {"a": vec(0)}, {"a": [(None, CPU1), (10.0, CPU1)]}, 0.0, 10.0),        # the unlimited one is not needed
    (2, {"a": vec(0)}, {"a": [(None, CPU1), (10.0, CPU1)]}, 0.0, None),        # it is: unknown
    (1, {"a": vec(0)}, {"a": [(4.0, CPU1)]}, 9.0, 9.0),                        # overdue: ends any moment
    (3, {"a": vec(0)}, {"a": [(4.0, CPU1)]}, 0.0, None),                       # never fits there
    (1, {"a": vec(0.5)}, {"a": [(7.0, vec(0.5))]}, 0.0, 7.0),                  # partial room adds up
])
def test_earliest_start(size: int, free: dict, ends: dict, now: float, expected: float | None) -> None:
    assert earliest_start(size, CPU1, free, ends, now) == expected


@pytest.mark.parametrize("now, limit, estimate, allowed", [
    (0.0, 10.0, 100.0, True),
    (0.0, 100.0, 100.0, False),     # ends exactly when needed: not before
    (0.0, 200.0, 100.0, False),
    (0.0, 0.0, 100.0, False),       # no time limit: may run for ever
    (0.0, 10.0, None, False),       # unknown estimate: no backfill
    (95.0, 10.0, 100.0, False),     # the limit counts from now
])
def test_may_backfill(now: float, limit: float, estimate: float | None, allowed: bool) -> None:
    assert may_backfill(now, limit, estimate) is allowed


@pytest.mark.parametrize("started, limit, now, expected", [
    (100.0, 60.0, 120.0, 160.0), (100.0, 0.0, 120.0, None), (None, 60.0, 120.0, 180.0), (0.0, 60.0, 120.0, 60.0),
])
def test_latest_end(started: float | None, limit: float, now: float, expected: float | None) -> None:
    assert latest_end(started, limit, now) == expected


def test_decide_names_the_holders_it_would_delay() -> None:
    holds = [Hold("g", ("a", "b"), 100.0), Hold("s", ("c",), 20.0), Hold("u", ("d",), None)]
    decision = decide("j", 30.0, holds, 0.0)
    assert decision.allowed == {"a": "g", "b": "g"}
    assert decision.delays == ("s", "u")
    assert decide("g", 30.0, holds, 0.0).allowed == {}     # its own room is not backfill


def _round(limit_s: float, backfill: bool = True, running_limit_s: float = 100.0):
    """One 2-cpu node: `run` has a task on 1 cpu (started at 0, its limit `running_limit_s`),
    gang `g` (2 x 1 cpu) holds the node, and `j` (1 cpu, --time-limit limit_s) is tried at 10."""
    nodes = NodeMatrix()
    nodes.upsert("n1", Resources(cpu=2, memory=0), {}, schedulable=True)
    nodes.allocate("n1", Resources(cpu=1, memory=0))
    jobs = {
        "run": Job("run", JobSpec(("x",), Resources(cpu=1, memory=0), time_limit_s=running_limit_s), 0.0),
        "g": Job("g", JobSpec(("x",), Resources(cpu=1, memory=0), tasks=2, gang=True), 1.0),
        "j": Job("j", JobSpec(("x",), Resources(cpu=1, memory=0), time_limit_s=limit_s), 2.0),
    }
    tasks = {"g": [Task("g", 0), Task("g", 1)], "j": [Task("j", 0)]}
    book = Reservations(0.0)
    book.held["n1"] = Reservation("g", "n1", 1.0, gang=True)
    book.waiting_since["g"] = 1.0
    ends = {"n1": [(latest_end(0.0, running_limit_s, 10.0), CPU1)]} if backfill else None
    return schedule_round(jobs, tasks, nodes, make_fairness("drf"), make_placement("first-fit"), random.Random(0),
                          reservations=book, now=10.0, running_ends=ends)


@pytest.mark.parametrize("limit_s, backfill, running_limit_s, starts, reason", [
    (30.0, True, 100.0, True, ""),                     # 10 + 30 < 100: backfilled
    (95.0, True, 100.0, False, "would delay job g"),   # 10 + 95 > 100
    (0.0, True, 100.0, False, "would delay job g"),    # no time limit
    (30.0, True, 0.0, False, "would delay job g"),     # the running task has none: unknown estimate
    (30.0, False, 100.0, False, ""),                   # --no-backfill: held room takes nobody
])
def test_round_backfills_only_what_ends_before_the_estimate(limit_s: float, backfill: bool, running_limit_s: float,
                                                           starts: bool, reason: str) -> None:
    result = _round(limit_s, backfill, running_limit_s)
    placed = [(t.job_id, node) for t, node in result.placements]
    assert placed == ([("j", "n1")] if starts else [])
    assert result.backfilled == ({"j": "g"} if starts else {})
    text = result.pending_reasons.get("j", "")
    assert reason in text and ("would delay" in text) == bool(reason)
    assert result.holds is not None and result.holds.holders() == {"n1": "g"}   # the hold stays


SCENARIO = """
nodes: [{{name: n1, capacity: {{cpu: 2, memory: 1Gi}}}}]
reserve_after_s: 0
backfill: {backfill}
jobs:
  - {{name: run, submit: 0, tasks: 1, resources: {{cpu: 1}}, duration: 100, time_limit: 100}}
  - {{name: gang, submit: 1, tasks: 2, resources: {{cpu: 1}}, duration: 10, gang: true}}
  - {{name: short, submit: 5, tasks: 1, resources: {{cpu: 1}}, duration: 20, time_limit: 30}}
  - {{name: long, submit: 5, tasks: 1, resources: {{cpu: 1}}, duration: 20, time_limit: 200}}
"""


def _starts(backfill: bool) -> dict[str, float]:
    run = simulate(parse_scenario(SCENARIO.format(backfill=str(backfill).lower()), "t.yaml"), "drf", "first-fit")
    return {t.spec.name: min(r.start for r in t.runs) for t in run.tracks}


def test_sim_short_job_backfills_the_gangs_room_and_the_long_one_waits() -> None:
    on, off = _starts(True), _starts(False)
    assert on["short"] == 5.0 and on["gang"] == 100.0 and on["long"] == 110.0
    assert off["short"] == 110.0 and off["gang"] == 100.0


# ---- the property: backfill never delays the reserved job ----

from hypothesis import given, settings, strategies as st   # noqa: E402  (the property's own imports)

_later = st.tuples(st.integers(2, 60), st.integers(1, 2), st.integers(1, 80), st.sampled_from(["none", "exact", "more"]),
                   st.integers(1, 50))


def _workload(nodes: int, cpus: int, fillers: list[int], later: list[tuple[int, int, int, str, int]],
              backfill: bool) -> str:
    """`nodes` x `cpus`; fillers (1 cpu, running exactly their time limit) from 0; at 1 a
    gang that needs the whole cluster (so its reservation is every node); then `later`
    jobs (submit, tasks, duration, time limit none / = duration / more) that backfill may start."""
    lines = [f"nodes: [{{count: {nodes}, name_prefix: n, capacity: {{cpu: {cpus}, memory: 1Gi}}}}]",
             "reserve_after_s: 0", f"backfill: {str(backfill).lower()}", "jobs:"]
    for i, duration in enumerate(fillers):
        lines.append(f"  - {{name: f{i}, submit: 0, tasks: 1, resources: {{cpu: 1}}, duration: {duration}, "
                     f"time_limit: {duration}}}")
    lines.append(f"  - {{name: gang, submit: 1, tasks: {nodes * cpus}, resources: {{cpu: 1}}, duration: 10, gang: true}}")
    for i, (submit, tasks, duration, kind, extra) in enumerate(later):
        limit = {"none": "", "exact": f", time_limit: {duration}", "more": f", time_limit: {duration + extra}"}[kind]
        lines.append(f"  - {{name: l{i}, submit: {submit}, tasks: {tasks}, resources: {{cpu: 1}}, "
                     f"duration: {duration}{limit}}}")
    return "\n".join(lines)


def _gang_start(text: str) -> tuple[float, int]:
    run = simulate(parse_scenario(text, "p.yaml"), "drf", "first-fit")
    gang = next(t for t in run.tracks if t.spec.name == "gang")
    return min(r.start for r in gang.runs), run.counters.get("jobs_backfilled", 0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.lists(st.integers(5, 100), min_size=1, max_size=9),
       st.lists(_later, max_size=12))
def test_backfill_never_delays_the_reserved_job(nodes: int, cpus: int, fillers: list[int],
                                                later: list[tuple[int, int, int, str, int]]) -> None:
    fillers = fillers[:nodes * cpus]
    with_backfill, _ = _gang_start(_workload(nodes, cpus, fillers, later, True))
    without, _ = _gang_start(_workload(nodes, cpus, fillers, later, False))
    assert with_backfill <= without


def test_the_property_workload_backfills() -> None:
    """The property is not vacuous: its workloads do start jobs by backfill."""
    later = [(2, 1, 5, "exact", 0), (3, 1, 5, "none", 0), (4, 1, 90, "more", 20)]
    text = _workload(1, 2, [50], later, True)
    start, backfilled = _gang_start(text)
    assert backfilled == 1 and start == 50.0
    assert _gang_start(_workload(1, 2, [50], later, False)) == (50.0, 0)


_job = st.tuples(st.integers(0, 80), st.integers(1, 4), st.integers(1, 2), st.integers(1, 90),
                 st.sampled_from(["none", "exact", "more"]), st.integers(1, 60), st.booleans())


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(2, 4), st.lists(_job, min_size=1, max_size=14))
def test_a_reserved_job_never_starts_after_an_estimate_backfill_acted_on(
        nodes: int, cpus: int, jobs: list[tuple[int, int, int, int, str, int, bool]]) -> None:
    """Any workload (tasks may end before their limits, some have none; gangs and starving
    jobs hold room): a job that held room starts no later than the earliest start estimate
    backfill knew for it, the promise that lets backfilled work never delay it."""
    lines = [f"nodes: [{{count: {nodes}, name_prefix: n, capacity: {{cpu: {cpus}, memory: 1Gi}}}}]",
             "reserve_after_s: 5", "jobs:"]
    for i, (submit, tasks, cpu, duration, kind, extra, gang) in enumerate(jobs):
        tasks, cpu = min(tasks, nodes * cpus // cpu), min(cpu, cpus)
        limit = {"none": "", "exact": f", time_limit: {duration}", "more": f", time_limit: {duration + extra}"}[kind]
        lines.append(f"  - {{name: j{i}, submit: {submit}, tasks: {max(tasks, 1)}, resources: {{cpu: {cpu}}}, "
                     f"duration: {duration}{limit}{', gang: true' if gang else ''}}}")
    run = simulate(parse_scenario("\n".join(lines), "p.yaml"), "drf", "first-fit")
    for track in run.tracks:
        if track.estimate is not None:
            assert min(r.start for r in track.runs) <= track.estimate + 1e-6, track.spec.name


# ---- the knob: tcl-master --backfill / --no-backfill, TOML `backfill` ----

from pathlib import Path   # noqa: E402

from tcluster.daemonkit.configfile import load_args   # noqa: E402
from tcluster.master.app.main import build_parser, settings_from_args   # noqa: E402


@pytest.mark.parametrize("toml, flags, on", [
    ("", [], True),                                   # on by default
    ("", ["--no-backfill"], False),
    ("", ["--backfill"], True),
    ("backfill = false\n", [], False),
    ("backfill = true\n", [], True),
    ("backfill = false\n", ["--backfill"], True),     # the flag wins over the file
    ("backfill = true\n", ["--no-backfill"], False),
])
def test_the_backfill_knob(tmp_path: Path, toml: str, flags: list[str], on: bool) -> None:
    conf = tmp_path / "m.toml"
    conf.write_text(toml)
    loaded = load_args(build_parser(), ["--config", str(conf), *flags])
    assert settings_from_args(loaded.args).backfill is on


def test_a_backfill_key_that_is_not_a_boolean_is_refused() -> None:
    with pytest.raises(Exception, match=r"backfill: 'yes' must be true or false"):
        parse_scenario("nodes: [{name: n1, capacity: {cpu: 1}}]\nbackfill: 'yes'\n"
                       "jobs: [{name: a, submit: 0, tasks: 1, resources: {cpu: 1}, duration: 1}]\n", "s.yaml")


def test_tcl_why_says_a_job_was_backfilled() -> None:
    from tcluster.cli.why import why_text
    doc = {"job": "s1", "state": "RUNNING", "queue": "default", "running_tasks": 1, "pending_tasks": 0,
           "pending_reason": "", "queue_share": None, "queues_above_their_share": [], "preempted": [],
           "backfilled": "backfilled: ends before job g1 needs the node", "held_back_by": None}
    assert "started: backfilled: ends before job g1 needs the node" in why_text(doc)
    assert "started:" not in why_text({**doc, "backfilled": ""})


def _reference_start(size: int, request: np.ndarray, free: dict, ends: dict, now: float) -> float | None:
    """earliest_start, one end at a time (what the vectorized one must equal)."""
    def fits(room: np.ndarray) -> int:
        return int(np.floor(min(room[k] / request[k] for k in range(len(request)) if request[k] > 0) + 1e-9))
    room = {n: np.array(f, dtype=float) for n, f in free.items()}
    if sum(fits(r) for r in room.values()) >= size:
        return now
    for end, node, i in sorted((e if e is not None else float("inf"), n, i)
                               for n in room for i, (e, _) in enumerate(ends.get(n, ()))):
        if end == float("inf"):
            return None
        room[node] = room[node] + ends[node][i][1]
        if sum(fits(r) for r in room.values()) >= size:
            return max(end, now)
    return None


_end = st.tuples(st.one_of(st.none(), st.integers(0, 50).map(float)), st.integers(0, 3), st.integers(0, 2))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(1, 2), st.integers(0, 2), st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)),
       min_size=1, max_size=4), st.lists(st.tuples(st.integers(0, 3), _end), max_size=12), st.integers(0, 20))
def test_the_vectorized_estimate_equals_one_end_at_a_time(size: int, cpu: int, mem: int, frees: list,
                                                          running: list, now: int) -> None:
    request = np.array([float(cpu), float(mem)])
    free = {f"n{i}": np.array([float(c), float(m)]) for i, (c, m) in enumerate(frees)}
    ends: dict = {}
    for node, (end, c, m) in running:
        if f"n{node}" in free:
            ends.setdefault(f"n{node}", []).append((end, np.array([float(c), float(m)])))
    assert earliest_start(size, request, free, ends, float(now)) == _reference_start(size, request, free, ends, now)
