"""Placement policies: TCluster's Table 3, agreement with the loop reference, invariants."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.resources import Resources
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import PLACEMENT_POLICIES, make_placement
from testkit.placement_reference import NodeView, place, reference_choose

MiB = 2**20
# TCluster, Table 1 (free after reserving 0.2 CPU per server) and Table 2.
TABLE1 = [(3.8, 1847), (3.8, 1851), (3.8, 1858), (3.8, 1859), (3.8, 1855)]
TABLE2 = [(1.2, 1000), (2.5, 900), (2.5, 1200), (3.0, 800), (3.0, 1500),
          (0.7, 300), (1.0, 600), (1.7, 800), (1.1, 900), (0.5, 800)]


def place_in_order(policy: str, caps: list[tuple[float, int]], jobs: list[tuple[float, int]],
                   seed: int = 0) -> tuple[list[int], NodeMatrix]:
    matrix = NodeMatrix()
    for i, (cpu, mem) in enumerate(caps, 1):
        matrix.upsert(f"s{i}", Resources(cpu, mem * MiB), {})
    chooser, rng, view, pending = make_placement(policy), random.Random(seed), matrix.view(), []
    for number, (cpu, mem) in enumerate(jobs, 1):
        request = Resources(cpu, mem * MiB)
        row = chooser.choose(view.request_vector(request), view, None, rng)
        if row is None:
            pending.append(number)
        else:
            matrix.allocate(view.names[row], request)
    return pending, matrix


def test_table3_first_fit_leaves_jobs_8_and_9_pending() -> None:
    pending, _ = place_in_order("first-fit", TABLE1, TABLE2)
    assert pending == [8, 9]


def test_table3_anbf_runs_all_ten_with_the_papers_free_memory() -> None:
    pending, matrix = place_in_order("anbf", TABLE1, TABLE2)
    assert pending == []
    assert [round(matrix.free(n).memory / MiB) for n in matrix.names] == [47, 51, 258, 59, 55]


@pytest.mark.parametrize("policy,expected", [
    ("first-fit", "a"),    # name order
    ("best-fit", "b"),     # least cpu (the dominant kind) left over
    ("worst-fit", "c"),    # most left over
    ("anbf", "b"),         # nearest free vector
    ("tetris", "c"),       # best aligned with the request
])
def test_each_policy_picks_its_node(policy: str, expected: str) -> None:
    nodes = [NodeView("a", Resources(8, 8 * MiB), Resources(4, 4 * MiB)),
             NodeView("b", Resources(8, 8 * MiB), Resources(2, 2 * MiB)),
             NodeView("c", Resources(8, 8 * MiB), Resources(8, 8 * MiB)),
             NodeView("d", Resources(8, 8 * MiB), Resources(1, 8 * MiB))]
    assert place(make_placement(policy), Resources(2, 2 * MiB), nodes, random.Random(0)) == expected


def test_ties_go_to_the_first_name_and_down_nodes_are_skipped() -> None:
    matrix = NodeMatrix()
    for name in ("n3", "n1", "n2"):
        matrix.upsert(name, Resources(4, 4 * MiB), {})
    matrix.set_schedulable("n1", False)
    view = matrix.view()
    for policy in PLACEMENT_POLICIES:
        if policy != "random-fit":
            assert view.names[make_placement(policy).choose(np.array([1.0, MiB]), view, None, random.Random(0))] == "n2"


def test_unknown_policy_lists_the_known_ones() -> None:
    with pytest.raises(InvalidArgument) as info:
        make_placement("best")
    assert "anbf" in str(info.value) and "first-fit" in str(info.value) and "tetris" in str(info.value)


def test_a_kind_no_node_has_cannot_be_placed() -> None:
    matrix = NodeMatrix()
    matrix.upsert("n1", Resources(4, MiB), {})
    assert matrix.view().request_vector(Resources(1, 0, (("gpu", 1.0),))) is None


clusters = st.lists(
    st.tuples(st.sampled_from([1.0, 2.0, 4.0, 8.0, 16.0, 3.8]), st.sampled_from([512, 1024, 2048, 1847, 4096]),
              st.booleans()),
    min_size=1, max_size=12,
)
requests = st.lists(st.tuples(st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2.5]),
                              st.sampled_from([0, 100, 256, 512, 900])), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None)
@given(clusters, requests, st.sampled_from(sorted(PLACEMENT_POLICIES)), st.integers(0, 2**16))
def test_vectorized_policies_decide_like_the_loop_reference(nodes, tasks, policy, seed) -> None:  # type: ignore[no-untyped-def]
    matrix = NodeMatrix()
    names = [f"n{i:02d}" for i in range(len(nodes))]
    random.Random(seed).shuffle(names)   # join order differs from name order
    for name, (cpu, mem, up) in zip(names, nodes):
        matrix.upsert(name, Resources(cpu, mem * MiB), {}, schedulable=up)
    view, chooser = matrix.view(), make_placement(policy)
    fast_rng, slow_rng = random.Random(seed), random.Random(seed)
    for cpu, mem in tasks:
        if cpu == 0 and mem == 0:
            continue
        vector = view.request_vector(Resources(cpu, mem * MiB))
        fast = chooser.choose(vector, view, None, fast_rng)
        order = view.order   # the reference walks the nodes in name order
        slow = reference_choose(policy, vector.tolist(), view.free[order].tolist(), view.scale.tolist(),
                                view.schedulable[order].tolist(), slow_rng)
        assert fast == (None if slow is None else int(order[slow]))
        if fast is not None:
            assert Resources(cpu, mem * MiB).fits_in(matrix.free(view.names[fast]))
            matrix.allocate(view.names[fast], Resources(cpu, mem * MiB))
    assert (view.free >= -1e-9).all(), "nothing is oversubscribed"


def _job_stream_agrees(policy: str, seed: int, nodes: int, jobs: int) -> int:
    """Jobs of 1-40 identical tasks placed through choose_each, with labels, down nodes
    and tasks ending between jobs, against reference_choose called once per task.
    Returns how many tasks were placed."""
    rng = random.Random(seed)
    matrix = NodeMatrix()
    names = [f"n{i:04d}" for i in range(nodes)]
    rng.shuffle(names)   # join order differs from name order
    for name in names:   # few shapes, so exact ties happen; some nodes half full
        cpu, mem = rng.choice([(4.0, 4096), (8.0, 8192), (8.0, 2048), (16.0, 16384), (3.8, 1847)])
        matrix.upsert(name, Resources(cpu, mem * MiB), {"zone": rng.choice("ab")}, schedulable=rng.random() > 0.1)
        if rng.random() < 0.5:
            matrix.allocate(name, Resources(rng.choice([0.5, 1.0, 2.0]), rng.choice([256, 512, 1000]) * MiB))
    view, chooser = matrix.view(), make_placement(policy)
    fast_rng, slow_rng, running, placed = random.Random(seed), random.Random(seed), [], 0
    zone_a = np.array([name is not None and matrix.labels[i].get("zone") == "a" for i, name in enumerate(view.names)])
    for _ in range(jobs):
        # the shapes of the initial allocations: a used row often ties with an untouched one
        request = Resources(rng.choice([0.5, 1.0, 2.0, 3.9]), rng.choice([256, 512, 1000, 1900]) * MiB)
        eligible = zone_a if rng.random() < 0.3 else None
        vector, order = view.request_vector(request), view.order
        rows = chooser.choose_each(vector, view, eligible, fast_rng)
        for _task in range(rng.randint(1, 40)):
            allowed = view.schedulable & (True if eligible is None else eligible)
            slow = reference_choose(policy, vector.tolist(), view.free[order].tolist(), view.scale.tolist(),
                                    allowed[order].tolist(), slow_rng)
            fast = next(rows)
            assert fast == (None if slow is None else int(order[slow]))
            if fast is None:
                break
            matrix.allocate(view.names[fast], request)
            running.append((view.names[fast], request))
            placed += 1
        for _ in range(rng.randint(0, 30)):   # tasks end between jobs
            if running:
                matrix.release(*running.pop(rng.randrange(len(running))))
    assert (view.free >= -1e-9).all(), "nothing is oversubscribed"
    return placed


@pytest.mark.parametrize("policy", sorted(set(PLACEMENT_POLICIES) - {"lotes"}))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_placing_a_whole_job_decides_like_the_reference_task_by_task(policy: str, seed: int) -> None:
    assert _job_stream_agrees(policy, seed, nodes=300, jobs=60) > 0


class _ChooseOnly:
    """anbf as a caller without rounds sees it: choose() alone, nothing kept."""

    def __init__(self) -> None:
        self._policy = make_placement("anbf")

    def choose(self, request, view, eligible, rng):  # type: ignore[no-untyped-def]
        return self._policy.choose(request, view, eligible, rng)


@pytest.mark.parametrize("seed", range(6))
def test_anbf_scores_kept_through_a_round_place_as_choose_alone(seed: int) -> None:
    from tcluster.domain.model import Job, JobSpec, Task
    from tcluster.scheduler.fairness import make_fairness
    from tcluster.scheduler.round import schedule_round
    rng = random.Random(seed)
    shapes = [(4.0, 4096), (8.0, 8192), (8.0, 2048), (16.0, 16384)]
    nodes = [(f"n{i:03d}", rng.choice(shapes), rng.choice("ab"), rng.random() > 0.1) for i in range(120)]
    rng.shuffle(nodes)   # join order differs from name order
    jobs, tasks = {}, {}
    for j in range(rng.randint(5, 40)):   # few request shapes, some constrained: cache hits and misses
        spec = JobSpec(("x",), Resources(rng.choice([0.5, 1.0, 2.0]), rng.choice([256, 512, 1000]) * MiB),
                       tasks=rng.randint(1, 60), constraints=(("zone=a",) if rng.random() < 0.3 else ()))
        jobs[f"j{j:02d}"] = Job(f"j{j:02d}", spec, float(j))
        tasks[f"j{j:02d}"] = [Task(f"j{j:02d}", k) for k in range(spec.tasks)]
    placed = []
    for placement in (make_placement("anbf"), _ChooseOnly()):
        matrix = NodeMatrix()
        for name, (cpu, mem), zone, up in nodes:
            matrix.upsert(name, Resources(cpu, mem * MiB), {"zone": zone}, schedulable=up)
        result = schedule_round(jobs, tasks, matrix, make_fairness("drf"), placement, random.Random(seed))  # type: ignore[arg-type]
        placed.append([(t.id, n) for t, n in result.placements])
    assert placed[0] == placed[1] and placed[0]
