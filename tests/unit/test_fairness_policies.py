"""drf, hdrf and mch: the published examples, and the invariants on random inputs."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from tcluster.scheduler.round import schedule_round
from tcluster.domain.model import Job, JobSpec, Task
from tcluster.domain.resources import Resources
from tcluster.scheduler.fairness import FAIRNESS_POLICIES, FairnessPolicy, make_fairness
from tcluster.scheduler.mch import MchState
from tcluster.scheduler.mch_paper import paper_weights
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import make_placement
from tcluster.scheduler.queues import QueueNode, QueueTree, parse_queue_text
from tcluster.scheduler.views import JobView

G = 10**9
GiB = 2**30
FIGURE4_TREE = parse_queue_text(
    "queues:\n  n1: {queues: {n1_1: {}, n1_2: {}}}\n  n2: {queues: {n2_1: {}, n2_2: {}, n2_3: {}}}\n"
    "  n3: {queues: {n3_1: {}}}\n", "figure4")
CPU_TASK, MEM_TASK = Resources(1), Resources(0, GiB)
FIGURE4_JOBS = [("n1.n1_1", CPU_TASK), ("n1.n1_2", MEM_TASK), ("n2.n2_1", CPU_TASK), ("n2.n2_2", CPU_TASK),
                ("n2.n2_3", MEM_TASK), ("n3.n3_1", CPU_TASK)]
FIGURE4_CAPACITY = Resources(200, 200 * GiB)


def views_of(jobs: list[tuple[str, Resources]], tasks: int = 2000, weights: list[float] | None = None) -> list[JobView]:
    return [JobView(f"j{i}", queue, float(i), demand, tasks, 0, (weights or [1.0] * len(jobs))[i])
            for i, (queue, demand) in enumerate(jobs)]


def fill(policy: FairnessPolicy, views: list[JobView], capacity: Resources, tree: QueueTree | None) -> dict[str, int]:
    """Progressive filling of one pool, as in the papers: a job whose task no longer fits
    is blocked, and so is every job needing a resource that ran out (limit)."""
    rnd = policy.start_round(views, capacity, tree)
    free, counts = capacity, {v.job_id: v.running for v in views}
    demand = {v.job_id: v.demand for v in views}
    while (job := rnd.next_job()) is not None:
        if not demand[job].fits_in(free):
            rnd.skip(job)
            continue
        free = free - demand[job]
        counts[job] += 1
        rnd.placed(job)
        rnd.limit(free)
    return counts


def one_node_round(policy: str, jobs: list[tuple[str, Resources, int]], capacity: Resources,
                   tree: QueueTree | None = None) -> dict[str, int]:
    """The master's own round on a cluster of one node."""
    matrix = NodeMatrix()
    matrix.upsert("n1", capacity, {})
    job_map = {f"j{i}": Job(f"j{i}", JobSpec(("x",), r, queue=q, tasks=n), float(i)) for i, (q, r, n) in enumerate(jobs)}
    tasks = {j: [Task(j, k) for k in range(job.spec.tasks)] for j, job in job_map.items()}
    result = schedule_round(job_map, tasks, matrix, make_fairness(policy), make_placement("first-fit"),
                            random.Random(0), queues=tree)
    counts = dict.fromkeys(job_map, 0)
    for task, _ in result.placements:
        counts[task.job_id] += 1
    return counts


def shares(counts: dict[str, int], views: list[JobView], capacity: Resources) -> list[float]:
    return [round(v.demand.times(counts[v.job_id]).dominant_share(capacity), 3) for v in views]


# ---- published results ----

@pytest.mark.parametrize("policy", ["drf", "hdrf", "mch"])
def test_drf_papers_example_gives_3_and_2_tasks(policy: str) -> None:
    jobs = [("default", Resources(1, 4 * G), 20), ("default", Resources(3, 1 * G), 20)]
    assert one_node_round(policy, jobs, Resources(9, 18 * G)) == {"j0": 3, "j1": 2}


def test_fifo_is_still_there_and_serves_in_submit_order() -> None:
    assert set(FAIRNESS_POLICIES) == {"fifo", "drf", "hdrf", "mch"}
    jobs = [("default", Resources(1, 4 * G), 20), ("default", Resources(3, 1 * G), 20)]
    assert one_node_round("fifo", jobs, Resources(9, 18 * G)) == {"j0": 4, "j1": 1}


@pytest.mark.parametrize("policy", ["hdrf", "mch"])
def test_mch_figure4_shares_while_all_jobs_are_active(policy: str) -> None:
    views = views_of(FIGURE4_JOBS)
    got = shares(fill(make_fairness(policy), views, FIGURE4_CAPACITY, FIGURE4_TREE), views, FIGURE4_CAPACITY)
    for share, paper in zip(got, [0.33, 0.5, 0.165, 0.165, 0.5, 0.33]):
        assert share == pytest.approx(paper, abs=0.006)   # one task is 0.005


def test_flat_drf_ignores_the_departments_in_figure4() -> None:
    views = views_of(FIGURE4_JOBS)
    got = shares(fill(make_fairness("drf"), views, FIGURE4_CAPACITY, FIGURE4_TREE), views, FIGURE4_CAPACITY)
    assert got == [0.25, 0.5, 0.25, 0.25, 0.5, 0.25]


def test_mch_figure4_flattened_weights_are_the_papers() -> None:
    weights, first = paper_weights(views_of(FIGURE4_JOBS), FIGURE4_CAPACITY, FIGURE4_TREE)
    assert first == "cpu"
    assert [round(weights[f"j{i}"], 6) for i in range(6)] == [1, 1, 0.5, 0.5, 1, 1]


def test_before_cpu_saturates_a_memory_job_is_weighted_like_its_siblings() -> None:
    # H-DRF equalizes n2,3 with n2,1 and n2,2 until the CPU runs out; MCH re-flattens
    # when the CPU jobs are blocked, which is where the paper's weight 1 comes from.
    state = MchState(FIGURE4_TREE, FIGURE4_CAPACITY)
    state.sync(views_of(FIGURE4_JOBS))
    assert [round(state.weights()[f"j{i}"], 6) for i in range(6)] == [1, 1, 0.5, 0.5, 0.5, 1]
    for cpu_job in ("j0", "j2", "j3", "j5"):
        state.block(cpu_job)
    assert state.weights() == pytest.approx({"j1": 1.0, "j4": 1.0})


@pytest.mark.parametrize("policy", ["hdrf", "mch"])
def test_when_n12_leaves_n23_rises_to_one_and_the_others_stay(policy: str) -> None:
    fairness = make_fairness(policy)   # one policy object: mch keeps its state across rounds
    views = views_of(FIGURE4_JOBS)
    counts = fill(fairness, views, FIGURE4_CAPACITY, FIGURE4_TREE)
    before = shares(counts, views, FIGURE4_CAPACITY)
    left = [JobView(v.job_id, v.queue, v.submitted_at, v.demand, v.pending - counts[v.job_id], counts[v.job_id])
            for v in views if v.job_id != "j1"]
    used = sum((v.demand.times(v.running) for v in left), Resources())
    after_counts = fill(fairness, left, FIGURE4_CAPACITY - used, FIGURE4_TREE)
    after = shares(after_counts, left, FIGURE4_CAPACITY)
    assert after[3] == 1.0                                   # n2,3 takes all the memory
    assert after[:3] + after[4:] == before[:1] + before[2:4] + before[5:]


@pytest.mark.parametrize("policy", ["hdrf", "mch"])
def test_dove_tailing_jobs_do_not_starve_their_parents_sibling(policy: str) -> None:
    tree = parse_queue_text("queues:\n  a: {queues: {cpu: {}, mem: {}}}\n  b: {}\n", "dove")
    views = views_of([("a.cpu", Resources(1, 0)), ("a.mem", Resources(0, 1)), ("b", Resources(1, 1))], tasks=100)
    assert fill(make_fairness(policy), views, Resources(10, 10), tree) == {"j0": 5, "j1": 5, "j2": 5}


@pytest.mark.parametrize("policy", ["hdrf", "mch"])
def test_a_saturated_resource_stops_only_the_jobs_that_need_it(policy: str) -> None:
    tree = parse_queue_text("queues:\n  a: {}\n  b: {}\n", "blocked")
    views = views_of([("a", Resources(1, 1)), ("b", Resources(0, 1))], tasks=1000)
    assert fill(make_fairness(policy), views, Resources(4, 100), tree) == {"j0": 4, "j1": 96}


@pytest.mark.parametrize("policy, expected", [
    ("drf", {"j0": 25, "j1": 25, "j2": 25, "j3": 25}),
    ("hdrf", {"j0": 54, "j1": 6, "j2": 36, "j3": 4}),
    ("mch", {"j0": 54, "j1": 6, "j2": 36, "j3": 4}),
])
def test_the_papers_figure1_weights_split_the_cluster(policy: str, expected: dict[str, int]) -> None:
    tree = parse_queue_text("queues:\n  ads: {weight: 60, queues: {prod: {weight: 90}, test: {weight: 10}}}\n"
                            "  dev: {weight: 40, queues: {prod: {weight: 90}, test: {weight: 10}}}\n", "fig1")
    views = views_of([(q, Resources(1, 1)) for q in ("ads.prod", "ads.test", "dev.prod", "dev.test")], tasks=1000)
    assert fill(make_fairness(policy), views, Resources(100, 100), tree) == expected


# ---- random inputs ----

@st.composite
def trees(draw: st.DrawFn, path: str = "", depth: int = 3) -> QueueNode:
    children = []
    if depth > 0:
        for i in range(draw(st.integers(1 if not path else 0, 3))):
            children.append(draw(trees(f"{path}.q{i}" if path else f"q{i}", depth - 1)))
    weight = draw(st.sampled_from([0.5, 1.0, 1.0, 2.0, 3.0]))
    return QueueNode(path.rpartition(".")[2], path, weight, tuple(children))


@st.composite
def workloads(draw: st.DrawFn, tasks: st.SearchStrategy[int]) -> tuple[QueueTree, list[JobView], Resources]:
    tree = QueueTree(draw(trees()))
    views = []
    for i in range(draw(st.integers(1, 7))):
        cpu, mem = draw(st.sampled_from([0, 1, 2, 3])), draw(st.sampled_from([0, 1, 2, 5]))
        demand = Resources(cpu, mem) if cpu or mem else Resources(0, 1)   # partial types allowed
        weight = draw(st.sampled_from([0.5, 1.0, 2.0]))
        views.append(JobView(f"j{i}", draw(st.sampled_from(tree.leaves)), float(draw(st.integers(0, 3))),
                             demand, draw(tasks), 0, weight))
    return tree, views, Resources(draw(st.integers(4, 80)), draw(st.integers(4, 80)))


@settings(max_examples=200, deadline=None)
@given(workloads(st.integers(1, 40)))
def test_hdrf_and_mch_allocate_the_same_within_one_task_per_job(case) -> None:  # type: ignore[no-untyped-def]
    tree, views, capacity = case
    exact = fill(make_fairness("hdrf"), views, capacity, tree)
    flat = fill(make_fairness("mch"), views, capacity, tree)
    assert all(abs(exact[j] - flat[j]) <= 1 for j in exact), (exact, flat)


def _subtree_share(views: list[JobView], counts: dict[str, int], path: str, capacity: Resources) -> tuple[float, float]:
    """(dominant share of what the jobs under `path` hold, sum of their one-task shares)."""
    inside = [v for v in views if v.queue == path or v.queue.startswith(path + ".")]
    held = sum((v.demand.times(counts[v.job_id]) for v in inside), Resources())
    return held.dominant_share(capacity), sum(v.demand.dominant_share(capacity) for v in inside)


@settings(max_examples=100, deadline=None)
@given(workloads(st.just(10**6)), st.sampled_from(["hdrf", "mch"]))
def test_sibling_weighted_shares_are_equal_up_to_a_task_per_job_while_nobody_is_blocked(case, policy) -> None:  # type: ignore[no-untyped-def]
    tree, views, capacity = case
    capacity = Resources(capacity.cpu * 10, capacity.memory * 10)
    rnd = make_fairness(policy).start_round(views, capacity, tree)
    free, counts, demand = capacity, {v.job_id: 0 for v in views}, {v.job_id: v.demand for v in views}
    while demand[job := rnd.next_job()].fits_in(free):   # stop at the first block
        free, counts[job] = free - demand[job], counts[job] + 1
        rnd.placed(job)
    for node in tree.walk():
        siblings = [(*_subtree_share(views, counts, c.path, capacity), c.weight) for c in node.children]
        siblings += [(counts[v.job_id] * v.demand.dominant_share(capacity), v.demand.dominant_share(capacity), v.weight)
                     for v in views if v.queue == node.path]
        active = [(held / w, step / w) for held, step, w in siblings if step > 0]
        for a_share, a_step in active:
            for b_share, b_step in active:
                assert a_share - b_share <= max(a_step, b_step) + 1e-9, (node.path, active)


@settings(max_examples=60, deadline=None)
@given(workloads(st.integers(1, 30)), st.sampled_from(["fifo", "drf", "hdrf", "mch"]),
       st.lists(st.tuples(st.integers(1, 20), st.integers(1, 20)), min_size=1, max_size=4))
def test_no_node_is_ever_over_allocated(case, policy, nodes) -> None:  # type: ignore[no-untyped-def]
    tree, views, _ = case
    matrix = NodeMatrix()
    capacities = {f"n{i}": Resources(c, m) for i, (c, m) in enumerate(nodes)}
    for name, cap in capacities.items():
        matrix.upsert(name, cap, {})
    jobs = {v.job_id: Job(v.job_id, JobSpec(("x",), v.demand, queue=v.queue, tasks=v.pending, weight=v.weight),
                          v.submitted_at) for v in views}
    tasks = {j: [Task(j, k) for k in range(job.spec.tasks)] for j, job in jobs.items()}
    result = schedule_round(jobs, tasks, matrix, make_fairness(policy), make_placement("first-fit"),
                            random.Random(0), queues=tree)
    used = {name: Resources() for name in capacities}
    for task, node in result.placements:
        used[node] = used[node] + jobs[task.job_id].spec.resources
    assert all(used[n].fits_in(capacities[n]) for n in capacities)


@settings(max_examples=150, deadline=None)
@given(workloads(st.integers(1, 30)), st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3)), max_size=25))
def test_mch_incremental_updates_match_a_fresh_flattening(case, changes) -> None:  # type: ignore[no-untyped-def]
    tree, views, capacity = case
    state = MchState(tree, capacity)
    current = {v.job_id: v for v in views}
    state.sync(current.values())
    for index, op in changes:   # jobs leave and come back, tasks start and finish, jobs block
        job_id = f"j{index}"
        if job_id not in current and index < len(views):
            current[job_id] = views[index]
        elif job_id in current and op == 0:
            del current[job_id]
        elif job_id in current:
            v = current[job_id]
            current[job_id] = JobView(v.job_id, v.queue, v.submitted_at, v.demand, max(0, op - 1), v.running + op, v.weight)
        state.sync(current.values())
    fresh = MchState(tree, capacity)
    fresh.sync(current.values())
    assert state.weights() == pytest.approx(fresh.weights(), rel=1e-9)
    assert state.pick() == fresh.pick()


class _AnyKinds(MchState):
    """The general propagation for every number of kinds: the reference for the
    unrolled two-kind path."""

    def _propagate(self, node: int, delta: list[float], count_delta: int) -> None:
        self._propagate_any(node, delta, count_delta)


@settings(max_examples=150, deadline=None)
@given(workloads(st.integers(1, 30)), st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4)), max_size=40))
def test_mch_two_kind_propagation_is_exactly_the_general_one(case, ops) -> None:  # type: ignore[no-untyped-def]
    tree, views, capacity = case
    fast, reference = MchState(tree, capacity), _AnyKinds(tree, capacity)
    picks: list[list[str | None]] = [[], []]
    for state, seen in zip((fast, reference), picks):
        state.sync(views)
        for index, op in ops:   # picks with placements, blocks, leaves and returns
            job_id = f"j{index}"
            if op == 0 and index < len(views):
                state.remove(job_id)
                state.add(views[index])
            elif op == 1:
                state.block(job_id)
            elif (job := state.pick()) is not None:
                state.placed(job)
            seen.append(state.pick())
    assert picks[0] == picks[1]
    assert (fast._sum, fast._mu, fast._norm, fast._factor) == (reference._sum, reference._mu,
                                                                  reference._norm, reference._factor)
