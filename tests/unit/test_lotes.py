"""LoTES offline stages against hand computations and the paper's published data."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from tcluster.scheduler.lotes.bins import nondominated_bins
from tcluster.scheduler.lotes.lp import round_machines, solve, solve_allocation, throughput
from tcluster.scheduler.lotes.model import Configuration, JobClass, Problem

# Tran et al., Table 1 (machines, cores, memory) and Table 2 (hours, cores, memory, share).
TABLE1 = [(6732, 0.50, 0.50), (3863, 0.50, 0.25), (1001, 0.50, 0.75), (795, 1.00, 1.00), (126, 0.25, 0.25),
          (52, 0.50, 0.12), (5, 0.50, 0.03), (5, 0.50, 0.97), (3, 1.00, 0.50), (1, 1.00, 0.06)]
TABLE2 = [(0.03, 0.02, 0.01, 0.23), (0.04, 0.02, 0.03, 0.46), (0.04, 0.07, 0.03, 0.30), (0.03, 0.20, 0.06, 0.01)]


def google(fit_fix: bool) -> Problem:
    configs = tuple(Configuration(f"c{j}", (cores, mem), n) for j, (n, cores, mem) in enumerate(TABLE1))
    classes = tuple(JobClass(f"k{i}", (cores, mem), share, {c.name: 1 / hours for c in configs})
                    for i, (hours, cores, mem, share) in enumerate(TABLE2))
    return Problem(("cpu", "memory"), configs, classes, fit_fix=fit_fix)


def test_the_papers_toy_example_fluid_bound_and_true_capacity() -> None:
    # Section 4.1: two machines of capacity 5, jobs of size 3: the fluid LP says 10/3, one job per machine is 2.
    plan = solve(Problem(("cpu",), (Configuration("a", (5.0,), 2),), (JobClass("x", (3.0,), 1.0),)))
    assert plan.lambda1 == pytest.approx(10 / 3)
    assert plan.lambda2_lp == pytest.approx(2.0) and plan.lambda2 == pytest.approx(2.0)


def two_by_two() -> Problem:
    """By hand: A (1 machine, 1x1) serves class 1 twice as fast. Class 1 on A costs 0.25
    resource per unit of throughput, on B 0.5; class 2 costs 0.25 anywhere. So A gives all
    to class 1 (throughput 4) and B takes the rest of class 1 plus class 2:
    0.5 (lambda/2 - 4) + 0.25 lambda/2 <= 3  =>  lambda*_1 = 40/3. Every bin fills its
    machine, so stage 2 reaches it too: 2a + b = 8/3 over B's bins (2,0), (1,2), (0,4).
    Whole machines: the best of (a, b, c), a + b + c = 3, is 12 (e.g. (1, 1, 1))."""
    return Problem(("cpu", "memory"),
                   (Configuration("A", (1.0, 1.0), 1), Configuration("B", (1.0, 1.0), 3)),
                   (JobClass("one", (0.5, 0.5), 0.5, {"A": 2.0, "B": 1.0}), JobClass("two", (0.25, 0.25), 0.5)))


def test_two_classes_two_configurations_against_the_hand_solution() -> None:
    problem = two_by_two()
    plan = solve(problem)
    assert plan.lambda1 == pytest.approx(40 / 3)
    assert plan.support == ((0,), (0, 1))
    assert plan.bins[0].tolist() == [[2, 0]]
    assert sorted(map(tuple, plan.bins[1].tolist())) == [(0, 4), (1, 2), (2, 0)]
    assert plan.lambda2_lp == pytest.approx(40 / 3)
    assert [int(m.sum()) for m in plan.machines] == [1, 3]
    assert 0 < plan.lambda2 <= 12 + 1e-9
    assert plan.lambda2 == pytest.approx(throughput(problem, plan.per_config))
    assert plan.routing.sum(axis=0) == pytest.approx([1.0, 1.0])


def test_figure5_bins() -> None:
    found = nondominated_bins(np.array([7.0]), np.array([[2.0], [3.0]]), (0, 1))
    assert sorted(map(tuple, found.counts.tolist())) == [(0, 2), (2, 1), (3, 0)]
    assert not found.truncated


def brute_force(capacity: np.ndarray, requests: np.ndarray) -> set[tuple[int, ...]]:
    most = [int(np.min(capacity / r)) for r in requests]
    fit = lambda n: np.all(np.array(n) @ requests <= capacity + 1e-12)   # noqa: E731
    return {n for n in itertools.product(*(range(m + 1) for m in most))
            if fit(n) and not any(fit(tuple(c + (i == k) for i, c in enumerate(n))) for k in range(len(n)))}


@pytest.mark.parametrize("seed", range(20))
def test_bins_are_exactly_the_maximal_fitting_multisets(seed: int) -> None:
    rng = random.Random(seed)
    capacity = np.array([1.0, rng.choice([0.5, 1.0])])
    requests = np.array([[rng.uniform(0.1, 0.6), rng.uniform(0.05, 0.5)] for _ in range(rng.randint(1, 3))])
    found = nondominated_bins(capacity, requests, tuple(range(len(requests))))
    assert set(map(tuple, found.counts.tolist())) == brute_force(capacity, requests)
    assert len(found.counts) == len(set(map(tuple, found.counts.tolist())))


def test_the_bin_cap_stops_enumeration_and_says_so() -> None:
    found = nondominated_bins(np.array([1.0, 1.0]), np.array([[0.05, 0.02], [0.02, 0.05], [0.03, 0.03]]), (0, 1, 2), cap=10)
    assert found.truncated and len(found.counts) == 10


def test_a_class_that_fits_nowhere_in_a_configuration_leaves_the_empty_bin() -> None:
    found = nondominated_bins(np.array([0.25, 0.03]), np.array([[0.2, 0.06]]), (0,))
    assert found.counts.tolist() == [[0]]


def test_google_stage1_optimum_is_the_unique_value() -> None:
    # The LP's vector is not unique (HiGHS and CPLEX return different K^j); its value is.
    assert solve_allocation(google(fit_fix=False)).value == pytest.approx(4_730_796.586, rel=1e-6)
    # With the fit fix, class 4 (memory 0.06) no longer goes to the 0.03-memory machines.
    assert solve_allocation(google(fit_fix=True)).value == pytest.approx(4_730_689.900, rel=1e-6)


def test_google_stage2_is_bounded_by_stage1_and_close_to_it() -> None:
    plan = solve(google(fit_fix=True))
    assert plan.lambda2 <= plan.lambda2_lp * (1 + 1e-9) <= plan.lambda1 * (1 + 1e-9)
    assert plan.lambda2 > 0.98 * plan.lambda1
    for machines, config in zip(plan.machines, plan.problem.configurations):
        assert machines.sum() == config.count and (machines >= 0).all()
    # Every emitted bin fits its machine by the mean requests.
    r, c = plan.problem.requests(), plan.problem.capacities()
    for j, bins in enumerate(plan.bins):
        assert (bins @ r <= c[j] + 1e-9).all()


def test_rounding_keeps_the_machine_count() -> None:
    assert round_machines(np.array([1.4, 0.6, 2.0]), 4).tolist() == [1, 1, 2]
    assert round_machines(np.array([0.5, 0.5, 0.5, 0.5]), 2).tolist() == [1, 1, 0, 0]   # stable ties


def test_a_capped_enumeration_still_solves_and_says_so() -> None:
    problem = google(fit_fix=True)
    capped = solve(Problem(problem.kinds, problem.configurations, problem.classes, bin_cap=5))
    assert any("cap of 5 bins" in note and "c0" in note for note in capped.notes)
    assert 0 < capped.lambda2 <= capped.lambda1
