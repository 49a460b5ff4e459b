"""Megha's federation simulation (sim/federation/sim.py) over small random federations, under
Hypothesis: no node is ever overcommitted, every launched task's constraints hold (K8),
every task is launched exactly once, and with repartition (and preemption) off no GM
ever meets an internal inconsistency (K7a)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tcluster.federation.messages import satisfies
from tcluster.cli.main import main
from tcluster.sim.federation.report import summarize
from tcluster.sim.federation.sim import FedConfig, FedSimRun, simulate
from tcluster.sim.federation.workload import WorkloadSpec

ROOT = Path(__file__).resolve().parents[2]


@st.composite
def federations(draw: st.DrawFn) -> tuple[FedConfig, WorkloadSpec]:
    lms = draw(st.integers(1, 3))
    cfg = FedConfig(
        lms=lms, gms=draw(st.integers(1, 3)), workers=draw(st.integers(lms, 4 * lms)),
        queues_per_gm=draw(st.integers(1, 2)), heartbeat_s=draw(st.sampled_from([0.5, 3.0, 10.0])),
        repartition=draw(st.booleans()), seed=draw(st.integers(0, 2**16)),
    )
    spec = WorkloadSpec(
        tasks=draw(st.integers(1, 60)), load=draw(st.floats(0.5, 2.0)), mean_duration_s=draw(st.sampled_from([0.5, 5.0])),
        constrained=draw(st.floats(0.0, 1.0)), n_constraints=draw(st.integers(0, 4)),
    )
    return cfg, spec


def check_ledger(run: FedSimRun) -> None:
    """Replays every commit and release in the LMs' order: no dimension of any node ever
    goes over its capacity, and each task's node satisfies its constraints (K8)."""
    held: dict[str, tuple[int, int, tuple[int, ...]]] = {}
    used: dict[tuple[int, int], list[int]] = {}
    for kind, lm, node, task_id, req in run.ledger:
        spec = run.clusters[lm][node]
        key = (lm, node)
        if kind == "commit":
            assert task_id not in held, f"{task_id} committed while it runs"
            assert satisfies(spec.cmask, run.pcs[task_id]), f"{task_id} on a node without its constraints"
            held[task_id] = (lm, node, req)
            used[key] = [u + r for u, r in zip(used.get(key, [0] * len(req)), req)]
            assert all(u <= c for u, c in zip(used[key], spec.cap)), f"node {key} overcommitted"
        else:
            *where, released = held.pop(task_id)
            assert tuple(where) == key
            used[key] = [u - r for u, r in zip(used[key], released)]
    assert not held, "tasks still holding room at the end"


def placeable_internally(run: FedSimRun, task_id: str) -> bool:
    """Whether some node of the task's GM's own partitions could ever hold it."""
    g, pc = run.records[task_id].gm, run.pcs[task_id]
    gms = run.config.gms
    return any(i % gms == g and satisfies(n.cmask, pc) for nodes in run.clusters for i, n in enumerate(nodes))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(federations())
def test_invariants_over_small_random_federations(fed: tuple[FedConfig, WorkloadSpec]) -> None:
    cfg, spec = fed
    run = simulate(cfg, spec)
    check_ledger(run)
    assert all(n == 1 for n in run.launches.values()), "a task started twice"
    for task_id, rec in run.records.items():
        if cfg.repartition or placeable_internally(run, task_id):
            assert run.launches.get(task_id) == 1, f"{task_id} never launched"
        else:
            assert task_id not in run.launches
        if rec.start is not None:
            assert rec.start >= rec.arrival and rec.end is not None
    if not cfg.repartition:
        assert sum(s.internal_inconsistencies for s in run.gm_stats) == 0      # K7a
    assert sum(s.refused for s in run.gm_stats) == 0                            # no failover here


def test_k7a_at_a_contended_size_and_inconsistencies_once_repartitions_are_on() -> None:
    spec = WorkloadSpec(tasks=600, load=1.3, mean_duration_s=2.0)
    off = simulate(FedConfig(lms=2, gms=3, workers=30, heartbeat_s=10.0, repartition=False, seed=5), spec)
    check_ledger(off)
    assert sum(s.internal_inconsistencies for s in off.gm_stats) == 0
    assert sum(s.no_room for s in off.gm_stats) > 0                            # it was contended
    on = simulate(FedConfig(lms=2, gms=3, workers=30, heartbeat_s=10.0, seed=5), spec)
    check_ledger(on)
    assert sum(s.repartitions for s in on.gm_stats) > 0
    assert sum(s.internal_inconsistencies + s.external_inconsistencies for s in on.gm_stats) > 0
    assert all(n == 1 for n in on.launches.values()) and len(on.launches) == 600


def test_the_summary_splits_allocation_time_into_its_components() -> None:
    run = simulate(FedConfig(lms=2, gms=2, workers=20, seed=3), WorkloadSpec(tasks=200))
    s = summarize(run)
    assert s.placed == 200 and s.unplaced == 0
    assert abs(sum(s.shares.values()) - 1.0) < 1e-6
    # An uncontended launch: a 0.5 ms request plus a 0.5 ms launch message, two handlers.
    assert s.parts_ms["communication"][0] == pytest.approx(1.0) and s.alloc_ms[0] >= 1.15 - 1e-9


ONE_FEDERATION = """
federation:
  workers: 20
  lms: 2
  gms: 2
  queues_per_gm: 2
  heartbeat_s: 5
  preemption: true
  systems: [megha]
  seed: 2
  workload: {tasks: 100, load: 0.9, mean_duration_s: 10, constrained: 0.5}
"""


def test_tcl_sim_runs_one_federation_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What `python -m tcluster.federation.sim` printed, `tcl sim` gives for `systems: [megha]`."""
    path = tmp_path / "one.yaml"
    path.write_text(ONE_FEDERATION)
    assert main(["sim", str(path)]) == 0
    out = capsys.readouterr().out
    for line in ("megha 2GMx2LM", "P50", "communication", "INCONSIST/1K", "REPART/1K"):
        assert line in out
    assert main(["sim", str(path), "-o", "json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert result["tasks"] == 100 and result["workers"] == 20
    assert {"internal inconsistencies", "external inconsistencies", "repartitions", "preemptions"} <= set(result["per_1000"])


def test_the_federation_imports_only_itself_and_the_standard_library() -> None:
    """Pure and sans-IO: no daemon, CLI, gRPC, store or numpy (the lab is sim/federation/)."""
    allowed = {"__future__", "collections", "dataclasses", "enum", "random", "typing"}
    for path in sorted((ROOT / "federation").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert name.startswith("tcluster.federation") or name.split(".")[0] in allowed, (path.name, name)
