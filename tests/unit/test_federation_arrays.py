"""The federation simulator's array engine (sim/federation/arrays.py) against the object
engine it replaces: on the same draw both place every task on the same node at the same
time (the same ledger, start times and GM counters), with repartition and preemption on or
off; the array view's first fit is match_task's, also after full states that keep newer
deltas and after debits; the Sparrow baseline's cached eligible workers are the brute-force ones."""

from __future__ import annotations

import random
from dataclasses import replace
from unittest.mock import patch

import numpy as np

from hypothesis import HealthCheck, given, settings, strategies as st

from tcluster.federation.messages import LMLayout, LMNode, LMState, TaskEnded, fits, satisfies
from tcluster.federation.lm import LocalManager
from tcluster.federation.view import LMView, match_task, split
from tcluster.sim.federation import arrays
from tcluster.sim.federation.arrays import ArrayLMView, FreeRows
from tcluster.sim.federation.sim import FedConfig, FederationSim, FedSimRun, simulate
from tcluster.sim.federation.sparrow import SparrowConfig, SparrowSim
from tcluster.sim.federation.workload import WorkloadSpec


def placements(run: FedSimRun) -> tuple[object, ...]:
    starts = sorted((k, r.start, r.end, r.lm, r.node, r.attempts) for k, r in run.records.items())
    return run.ledger, starts, run.gm_stats, run.launches


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lms=st.integers(1, 3), gms=st.integers(1, 3), per_lm=st.integers(1, 6), tasks=st.integers(1, 60),
       repartition=st.booleans(), preemption=st.booleans(), seed=st.integers(0, 2**16),
       load=st.floats(0.5, 2.0), n_constraints=st.integers(0, 4))
def test_both_engines_place_the_same_tasks_on_the_same_nodes_at_the_same_times(
        lms: int, gms: int, per_lm: int, tasks: int, repartition: bool, preemption: bool, seed: int,
        load: float, n_constraints: int) -> None:
    cfg = FedConfig(lms=lms, gms=gms, workers=lms * per_lm, repartition=repartition, preemption=preemption,
                    heartbeat_s=3.0, seed=seed)
    spec = WorkloadSpec(tasks=tasks, load=load, mean_duration_s=5.0, n_constraints=n_constraints)
    old = simulate(replace(cfg, engine="object"), spec)
    with patch.object(arrays, "ARRAY_MIN_NODES", 1):       # every LM on arrays, however small
        new = simulate(replace(cfg, engine="array"), spec)
    assert placements(new) == placements(old)


def test_lms_below_the_threshold_keep_the_object_classes_and_larger_ones_take_arrays() -> None:
    small = [tuple(LMNode((64, 16384), 1) for _ in range(4))]
    big = [tuple(LMNode((64, 16384), 1) for _ in range(arrays.ARRAY_MIN_NODES))]
    one = FedConfig(lms=1, gms=2, workers=4)
    sim = FederationSim(one, small, [])
    assert type(sim.lms[0]) is LocalManager and type(sim.gms[0].views[0]) is LMView
    sim = FederationSim(one, big, [])
    assert type(sim.lms[0]) is arrays.ArrayLocalManager and type(sim.gms[1].views[0]) is ArrayLMView
    with patch.object(arrays, "ARRAY_MIN_NODES", 1):
        assert type(FederationSim(one, small, []).lms[0]) is arrays.ArrayLocalManager
    assert type(FederationSim(replace(one, engine="object"), big, []).lms[0]) is LocalManager


def layouts(rng: random.Random, n: int, gms: int) -> LMLayout:
    nodes = tuple(LMNode((rng.choice([8, 16, 64]), rng.choice([1024, 4096])), rng.getrandbits(3)) for _ in range(n))
    return split(0, nodes, gms)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 40), gms=st.integers(1, 4))
def test_the_array_views_first_fit_is_match_tasks_after_states_deltas_and_debits(seed: int, n: int, gms: int) -> None:
    rng = random.Random(seed)
    layout = layouts(rng, n, gms)
    old, new = LMView(layout, gms, 3), ArrayLMView(layout, gms, 3)

    def room(cap: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(rng.randint(0, c) for c in cap)

    for _ in range(10):
        version = rng.randint(0, 12)      # out of order: some states older than a delta
        step = rng.random()
        if step < 0.4:
            free = tuple(room(x.cap) for x in layout.nodes)
            # the array LM's snapshot of the same room, or a plain tuple (both are taken)
            snapshot = FreeRows(np.array(free, dtype=np.int32).T.copy()) if step < 0.2 else free
            assert old.apply(LMState(0, 1, version, free)) == new.apply(LMState(0, 1, version, snapshot))  # type: ignore[arg-type]
        elif step < 0.7:
            node = rng.randrange(n)
            delta = TaskEnded(0, 1, version, "t", node, room(layout.nodes[node].cap))
            assert old.apply_delta(delta) == new.apply_delta(delta)
        else:
            node = rng.randrange(n)
            req = (rng.randint(0, 4), rng.randint(0, 256))
            old.debit(node, req)
            new.debit(node, req)
        assert list(new.free) == list(old.free)
        for _ in range(5):
            owner, pc = rng.randrange(gms), rng.getrandbits(3)
            req = (rng.choice([1, 4, 16, 32]), rng.choice([64, 512, 2048]))
            want = match_task(old.parts[owner], old.free, req, pc)
            assert new.match(owner, req, pc) == want == old.match(owner, req, pc)


def test_free_rows_read_and_write_one_node_as_a_tuple() -> None:
    view = ArrayLMView(split(0, (LMNode((4, 100), 0), LMNode((8, 200), 1)), 1), 1, 1)
    assert view.free[1] == (8, 200) and len(view.free) == 2
    view.debit(1, (3, 50))
    assert view.free[1] == (5, 150) and list(view.free) == [(4, 100), (5, 150)]
    assert view.match(0, (5, 150), 0) == 1 and view.match(0, (6, 1), 0) == -1


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 30))
def test_sparrows_eligible_workers_are_those_that_satisfy_and_fit_in_index_order(seed: int, n: int) -> None:
    rng = random.Random(seed)
    nodes = tuple(LMNode((rng.choice([8, 64]), rng.choice([1024, 16384])), rng.getrandbits(3)) for _ in range(n))
    sim = SparrowSim(SparrowConfig(), nodes, [])
    for _ in range(20):
        pc, req = rng.getrandbits(3), (rng.choice([4, 16, 32]), rng.choice([512, 4096]))
        want = [i for i, x in enumerate(nodes) if satisfies(x.cmask, pc) and fits(req, x.cap)]
        assert sim._candidates(pc, req) == want
