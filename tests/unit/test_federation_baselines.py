"""Megha's baselines (issue 25): the Sparrow batch sampler (sim/federation/sparrow.py) and
centralized Megha on the federation's draw (sim/federation/compare.py), the `federation:`
scenario of `tcl sim` (sim/federation/scenario.py), and the LoTES paper's real Greedy (machine
FIFO queues, sim/queueing.py) against first fit over a central queue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tcluster.cli.main import main
from tcluster.federation.messages import satisfies
from tcluster.scheduler.yamlsrc import YamlConfigError, load_located
from tcluster.sim.compare import compare as compare_policies
from tcluster.sim.federation.calibrate import measure_handlers
from tcluster.sim.federation.compare import compare, draw
from tcluster.sim.federation.scenario import parse_federation
from tcluster.sim.federation.sim import FedConfig
from tcluster.sim.federation.sparrow import SparrowConfig, simulate_sparrow
from tcluster.sim.federation.workload import WorkloadSpec
from tcluster.sim.scenario import parse_scenario


def sparrow_run(workers: int, tasks: int, load: float, probes: int = 2, seed: int = 4):
    clusters, arrivals = draw(workers, 1, 1, 1, WorkloadSpec(tasks=tasks, load=load), seed)
    return simulate_sparrow(SparrowConfig(probes=probes, seed=seed), clusters[0], arrivals)


def test_sparrow_at_low_load_places_with_almost_no_worker_queuing() -> None:
    run = sparrow_run(workers=40, tasks=300, load=0.2)
    starts = [r for r in run.records.values() if r.start is not None]
    assert len(starts) == 300
    # Scheduler handler, then probe, ask and reply: 0.1 + 3 x 0.5 ms when nothing queues.
    floor = 0.0001 + 3 * 0.0005
    quick = [r for r in starts if r.start - r.arrival <= floor + 1e-9]
    assert len(quick) >= 0.95 * len(starts)
    assert min(r.start - r.arrival for r in starts) == pytest.approx(floor)


def check_sparrow_ledger(run) -> None:  # type: ignore[no-untyped-def]
    """No node overcommitted in any dimension, every task on a node with its constraints
    (K8), every task that fits some node launched exactly once."""
    used: dict[int, list[int]] = {}
    held: dict[str, int] = {}
    for kind, node, task_id, req in run.ledger:
        sign = 1 if kind == "commit" else -1
        if kind == "commit":
            assert task_id not in held and satisfies(run.nodes[node].cmask, run.pcs[task_id])   # K8
            held[task_id] = node
        else:
            assert held.pop(task_id) == node
        used[node] = [u + sign * r for u, r in zip(used.get(node, [0, 0]), req)]
        assert all(u <= c for u, c in zip(used[node], run.nodes[node].cap)), f"node {node} overcommitted"
    assert not held
    placeable = [t for t, pc in run.pcs.items() if any(satisfies(n.cmask, pc) for n in run.nodes)]
    assert sorted(t for kind, _, t, _ in run.ledger if kind == "commit") == sorted(placeable)


def test_sparrow_never_overcommits_keeps_constraints_and_launches_each_task_once() -> None:
    run = sparrow_run(workers=12, tasks=400, load=1.2)
    check_sparrow_ledger(run)
    assert sum(kind == "commit" for kind, *_ in run.ledger) == 400
    # d = 2: every task's second reservation comes back empty (a task with one eligible
    # worker is probed once).
    twice = sum(len([n for n in run.nodes if satisfies(n.cmask, pc)]) >= 2 for pc in run.pcs.values())
    assert run.noops == twice > 300


def test_at_high_load_sparrow_queues_at_workers_and_megha_does_not() -> None:
    cfg = FedConfig(lms=2, gms=2, workers=40, seed=2)
    megha, central, sparrow = compare(cfg, WorkloadSpec(tasks=600, load=0.95, mean_duration_s=5.0))
    assert (megha.system, central.system, sparrow.system) == ("megha 2GMx2LM", "centralized 1GMx1LM", "sparrow d=2")
    assert megha.placed == central.placed == sparrow.placed == 600
    assert megha.parts_ms["worker queuing"][2] == 0.0 and sparrow.shares["worker queuing"] > 0.5
    assert sparrow.alloc_ms[1] > 10 * megha.alloc_ms[1]            # K2's direction: the tail
    assert sparrow.alloc_ms[0] <= megha.alloc_ms[0] + 1.0           # not the median
    # One GM over one LM: nothing to repartition, so never an inconsistency.
    assert central.per_1000["inconsistencies"] == 0 and central.per_1000["repartitions"] == 0
    for r in (megha, central, sparrow):
        assert sum(r.shares.values()) == pytest.approx(1.0)


@settings(max_examples=40, deadline=None)
@given(workers=st.integers(1, 8), tasks=st.integers(1, 80), load=st.floats(0.3, 2.0),
       probes=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_sparrow_invariants_over_small_random_clusters(workers: int, tasks: int, load: float, probes: int,
                                                      seed: int) -> None:
    check_sparrow_ledger(sparrow_run(workers, tasks, load, probes, seed))


LOTES = """
nodes:
  - {count: 4, name_prefix: a-, capacity: {cpu: 16, memory: 50Gi}}
  - {count: 4, name_prefix: b-, capacity: {cpu: 32, memory: 100Gi}}
  - {count: 4, name_prefix: c-, capacity: {cpu: 16, memory: 12Gi}}
workload:
  horizon: 20
  load: [0.7, 0.9]
  generate: {classes: 3, phi: 0.01, omega: 0.3, base: 0.05}
"""


def test_greedy_with_machine_queues_falls_behind_the_central_queue_at_high_load() -> None:
    runs, _, _ = compare_policies(parse_scenario(LOTES, "s.yaml"), ["greedy", "first-fit"], [0])
    by = {(r.load, r.policy): r for r in runs}
    assert set(by) == {(load, p) for load in (0.7, 0.9) for p in ("greedy", "first-fit-central")}
    assert by[(0.7, "greedy")].mean_queue < 0.5 and by[(0.7, "first-fit-central")].mean_queue < 0.5
    greedy, central = by[(0.9, "greedy")], by[(0.9, "first-fit-central")]
    # A task queued behind one busy machine waits while others free up.
    assert greedy.mean_queue > 3 * central.mean_queue and greedy.mean_response > 3 * central.mean_response


FED = """
federation:
  workers: [20, 30]
  lms: 2
  gms: 2
  systems: [megha, sparrow]
  workload: {tasks_per_worker: 5, mean_duration_s: 2}
"""


def test_tcl_sim_runs_a_federation_scenario_as_json_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fed.yaml"
    path.write_text(FED)
    plot = tmp_path / "cdf.png"
    assert main(["sim", str(path), "-o", "json", "--plot", str(plot)]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = [(r["system"], r["workers"], r["tasks"]) for r in report["results"]]
    assert rows == [("megha 2GMx2LM", 20, 100), ("sparrow d=2", 20, 100), ("megha 2GMx2LM", 30, 150),
                    ("sparrow d=2", 30, 150)]
    first = report["results"][0]
    assert set(first["parts_ms"]) == {"queuing", "processing", "worker queuing", "communication"}
    assert {"inconsistencies", "repartitions"} <= set(first["per_1000"]) and "alloc_s" not in first
    assert plot.stat().st_size > 0
    assert main(["sim", str(path), "--compare", "centralized"]) == 0
    out = capsys.readouterr().out
    assert "centralized 1GMx1LM" in out and "worker queuing" in out and "REPART/1K" in out
    assert main(["sim", str(path), "--compare", "yarn"]) == 2


@pytest.mark.parametrize("body, where", [
    ("federation: {workers: 10, colour: red}", "federation.colour: unknown key"),
    ("federation: {lms: 2}", "federation.workers: give the number of workers"),
    ("federation: {workers: 10, systems: [megha, yarn]}", "federation.systems[1]: 'yarn' is not a system"),
    ("federation: {workers: 10, gms: 0}", "federation.gms: 0 must be >= 1"),
    ("federation: {workers: 10, workload: {tasks: 5, tasks_per_worker: 1}}", "not both"),
    ("federation: {workers: 10, workload: {constrained: 2}}", "is a share"),
    ("federation: {workers: 10}\nnodes: []", "nodes: unknown key"),
    ("federation: {workers: 10, handler_times: often}", "federation.handler_times: 'often': allowed constant, measured"),
])
def test_a_bad_federation_scenario_names_the_field(body: str, where: str) -> None:
    with pytest.raises(YamlConfigError, match=None) as info:
        parse_federation(load_located(body, "f.yaml"))
    assert where in str(info.value)


def test_the_example_is_the_readme_s_10000_worker_federation() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "megha-federation.yaml"
    scenario = parse_federation(load_located(example.read_text(), str(example)))
    assert scenario.sizes == (10_000,) and (scenario.config.lms, scenario.config.gms) == (10, 10)
    assert scenario.systems == ("megha", "centralized", "sparrow") and scenario.probes == 2
    assert scenario.spec_for(10_000).tasks == 100_000 and scenario.workload.load == 0.9
    assert scenario.measured                       # the paper's way: handler times of the real code


def test_measured_handler_times_are_the_real_calls_medians_per_request() -> None:
    """A clock that moves 10 us per reading makes every timed call take exactly 10 us: the
    GM's is decide() + on_answer() (20 us), the LM's handle() (10 us), and only decisions
    that sent something count."""
    config = FedConfig(lms=2, gms=2, workers=40)
    clusters, arrivals = draw(40, 2, 2, 1, WorkloadSpec(tasks=200, load=0.9, mean_duration_s=5), 3)
    ticks = iter(range(10**9))
    times = measure_handlers(config, clusters, arrivals, sample=100, clock=lambda: next(ticks) * 1e-5)
    assert (round(times.gm_s, 9), round(times.lm_s, 9)) == (2e-5, 1e-5)
    assert times.calls >= 100                      # every task asked at least once
    result = compare(config, WorkloadSpec(tasks=200, load=0.9, mean_duration_s=5), ("megha",), measured=True)[0]
    assert "measured on this machine" in result.handlers and result.placed == 200
