"""LoTES stage 3 and its seams: v-scores, roulette, fallbacks, classes, configurations."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from tcluster.domain.resources import Resources
from tcluster.scheduler.lotes.classes import ClassWindow, classify, drift, group_configurations, kmeans, learn_classes, parse_classes
from tcluster.scheduler.lotes.dispatch import LotesBook, offer_order, roulette
from tcluster.scheduler.lotes.model import JobClass
from tcluster.scheduler.lotes.resolve import plan_for, resolve_reason
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import make_placement
from tcluster.scheduler.yamlsrc import YamlConfigError

G = 2**30
NODES = [*((f"a{i}", Resources(8, 16 * G), {}) for i in range(6)), *((f"b{i}", Resources(16, 16 * G), {}) for i in range(4))]
CLASSES = [JobClass("small", (1.0, 1.0 * G), 0.5), JobClass("cpu", (3.0, 1.0 * G), 0.3),
           JobClass("mem", (1.0, 4.0 * G), 0.2)]


def cluster() -> NodeMatrix:
    matrix = NodeMatrix()
    for name, capacity, labels in NODES:
        matrix.upsert(name, capacity, labels)
    return matrix


def lotes(matrix: NodeMatrix):  # type: ignore[no-untyped-def]
    outcome = plan_for(NODES, matrix.kinds, CLASSES)
    assert outcome.plan is not None, outcome.reason
    policy = make_placement("lotes")
    policy.book.adopt(outcome.plan)
    return policy


def test_without_a_plan_lotes_decides_as_anbf_and_says_so() -> None:
    matrix = cluster()
    view, rng = matrix.view(), random.Random(0)
    request = np.array([3.0, 2.0 * G])
    policy = make_placement("lotes")
    assert policy.fallback and "anbf" in policy.fallback
    assert policy.choose(request, view, None, rng) == make_placement("anbf").choose(request, view, None, rng)


def test_the_highest_v_machine_of_the_class_gets_the_task() -> None:
    matrix = cluster()
    policy = lotes(matrix)
    view, k = matrix.view(), 0
    config_rows, target, _ = policy.book.arrays(view)
    holders = [view.names[r] for r in np.flatnonzero(target[:, k] >= 1)]
    # Fill all but one holder to its target: the remaining one has the highest v.
    for name in holders[1:]:
        for _ in range(int(target[view.rows[name], k])):
            policy.book.started(name, k)
    chosen = policy.choose(np.array([1.0, 1.0 * G]), view, None, random.Random(0))
    assert view.names[chosen] == holders[0]


def test_a_task_that_fits_no_target_machine_goes_to_any_machine_that_fits() -> None:
    matrix = cluster()
    policy = lotes(matrix)
    view = matrix.view()
    eligible = np.zeros(len(view.names), dtype=bool)
    config_rows, target, _ = policy.book.arrays(view)
    outside = int(np.flatnonzero(target[:, 0] == 0)[0])   # a machine whose bin has no class 0
    eligible[outside] = True
    assert policy.choose(np.array([1.0, 1.0 * G]), view, eligible, random.Random(0)) == outside
    eligible[:] = False
    assert policy.choose(np.array([1.0, 1.0 * G]), view, eligible, random.Random(0)) is None


def test_tasks_chosen_in_one_round_count_against_v() -> None:
    matrix = cluster()
    policy = lotes(matrix)
    view, rng = matrix.view(), random.Random(3)
    policy.begin_round()
    rows = [policy.choose(np.array([1.0, 1.0 * G]), view, None, rng) for _ in range(12)]
    config_rows, target, _ = policy.book.arrays(view)
    per_row = Counter(rows)
    assert all(per_row[r] <= max(1, target[r, 0]) for r in per_row)   # spread, not piled on one node


def test_roulette_follows_the_weights() -> None:
    rng = random.Random(7)
    picks = Counter(roulette({0: 0.2, 1: 0.5, 2: 0.3}, rng) for _ in range(20_000))
    expected = [0.2, 0.5, 0.3]
    chi2 = sum((picks[j] - 20_000 * p) ** 2 / (20_000 * p) for j, p in enumerate(expected))
    assert chi2 < 13.8   # chi-square, 2 degrees of freedom, p = 0.001


def test_a_completion_offers_only_classes_of_the_configuration_by_v() -> None:
    matrix = cluster()
    plan = lotes(matrix).book.plan
    config = next(j for j in range(len(plan.per_config)) if (plan.per_config[j] == 0).any())
    absent = int(np.flatnonzero(plan.per_config[config] == 0)[0])
    order = offer_order(config, np.array([3, 2, 2]), np.array([3, 0, 1]), plan, [0, 1, 2])
    assert absent not in order
    assert order == sorted(order, key=lambda k: (-(np.array([3, 2, 2])[k] - np.array([3, 0, 1])[k]), k))


def test_configurations_group_identical_machines_most_first() -> None:
    configs = group_configurations(NODES, ("cpu", "memory"))
    assert [(c.name, c.count) for c in configs] == [("c01", 6), ("c02", 4)]
    by_label = group_configurations([(n, c, {"rack": n[0]}) for n, c, _ in NODES], ("cpu", "memory"), label="rack")
    assert [c.name for c in by_label] == ["a", "b"]


def test_kmeans_finds_separated_groups_deterministically() -> None:
    rng = np.random.default_rng(0)
    points = np.vstack([rng.normal(m, 0.01, size=(50, 2)) for m in ((0.1, 0.1), (0.5, 0.2), (0.2, 0.6))])
    a, labels_a = kmeans(points, 3, random.Random(1))
    b, labels_b = kmeans(points, 3, random.Random(1))
    assert np.array_equal(a, b) and np.array_equal(labels_a, labels_b)
    assert sorted(np.bincount(labels_a).tolist()) == [50, 50, 50]
    learned = learn_classes(list(points * [64, 256 * G]), np.array([64.0, 256.0 * G]), 3, random.Random(1))
    assert sum(c.share for c in learned) == pytest.approx(1.0)
    means = np.array([c.request for c in learned])
    assert classify(np.array([0.5 * 64, 0.2 * 256 * G]), means, np.array([64.0, 256.0 * G])) == 2


def test_resolve_triggers() -> None:
    matrix = cluster()
    plan = lotes(matrix).book.plan
    configs = group_configurations(NODES, matrix.kinds)
    assert resolve_reason(None, configs, None) == "no plan yet"
    assert resolve_reason(plan, configs, np.array([0.5, 0.3, 0.2])) is None
    assert "drifted" in resolve_reason(plan, configs, np.array([0.2, 0.3, 0.5]))
    assert resolve_reason(plan, configs[:1], None) == "machine configurations changed"
    assert drift(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == 1.0


def test_an_unsolvable_instance_leaves_no_plan_and_a_reason() -> None:
    huge = [JobClass("huge", (100.0, 1.0 * G), 1.0)]
    outcome = plan_for(NODES, ("cpu", "memory"), huge)
    assert outcome.plan is None and "stage 1" in outcome.reason
    book = LotesBook()
    book.drop(outcome.reason)
    assert book.plan is None and book.reason == outcome.reason


def test_classes_file_errors_name_the_field() -> None:
    good = "classes:\n  - {name: s, request: {cpu: 1, memory: 1Gi}, share: 0.5, speed: {c01: 2}}\n"
    (only,) = parse_classes(good, "c.yaml", ("cpu", "memory"))
    assert only.request == (1.0, float(G)) and only.speed == {"c01": 2.0}
    for text, where in [
        ("classes:\n  - {name: s, request: {cpu: 1}, share: -1}\n", "classes[0].share"),
        ("classes:\n  - {name: s, request: {cpu: 1}, share: 1, colour: red}\n", "classes[0].colour"),
        ("classes:\n  - {name: s, share: 1}\n", "classes[0].request"),
        ("classes: []\n", "classes"),
    ]:
        with pytest.raises(YamlConfigError) as info:
            parse_classes(text, "c.yaml", ("cpu", "memory"))
        assert where in str(info.value)


def test_the_window_keeps_the_latest_requests_and_measures_shares() -> None:
    window = ClassWindow(size=10, per_job=4)
    window.add(np.array([1.0, 1.0]), tasks=50)    # capped at 4 copies
    window.add(np.array([8.0, 8.0]), tasks=3)
    assert len(window.requests()) == 7
    window.add(np.array([8.0, 8.0]), tasks=4)     # the oldest fall out
    assert len(window.requests()) == 10
    shares = window.shares(np.array([[1.0, 1.0], [8.0, 8.0]]), np.array([8.0, 8.0]))
    assert shares.tolist() == [0.3, 0.7]
