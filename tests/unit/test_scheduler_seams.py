from __future__ import annotations

import random

from hypothesis import given, strategies as st

from tcluster.domain.model import Job, JobSpec, Task
from tcluster.scheduler.round import schedule_round
from tcluster.domain.resources import Resources
from tcluster.scheduler.fairness import FifoPolicy
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import FirstFit
from tcluster.domain.constraints import parse_constraint
from tcluster.scheduler.matching import EligibleCache
from tcluster.scheduler.reasons import never_fits_reason, unplaceable_reason
from tcluster.scheduler.reservations import LargestFree, largest_free
from tcluster.scheduler.views import JobView
from testkit.placement_reference import NodeView, place

GiB = 2**30


def _node(name: str, cpu: float, mem_gib: float) -> NodeView:
    cap = Resources(cpu, int(mem_gib * GiB))
    return NodeView(name, cap, cap)


def test_fifo_orders_by_submit_time_and_skips_without_blocking() -> None:
    jobs = [JobView("b", "q", 2.0, Resources(1), 1), JobView("a", "q", 1.0, Resources(1), 2),
            JobView("c", "q", 3.0, Resources(1), 0)]
    r = FifoPolicy().start_round(jobs, Resources(10))
    assert r.next_job() == "a"
    r.placed("a")
    assert r.next_job() == "a"
    r.skip("a")
    assert r.next_job() == "b"
    r.placed("b")
    assert r.next_job() is None


def test_first_fit_takes_the_first_node_in_order() -> None:
    nodes = [_node("n1", 1, 1), _node("n2", 4, 8), _node("n3", 8, 8)]
    assert place(FirstFit(), Resources(2, GiB), nodes, random.Random(0)) == "n2"
    assert place(FirstFit(), Resources(16, GiB), nodes, random.Random(0)) is None


def test_reasons_name_the_resource_and_the_largest_node() -> None:
    nodes = [_node("n1", 4, 2), _node("n2", 2, 4)]
    matrix = NodeMatrix()
    for n in nodes:
        matrix.upsert(n.name, n.capacity, {"rack": n.name})
    assert "enough memory" in unplaceable_reason(Resources(1, 3 * GiB), (), matrix, None) and "n2" in \
        unplaceable_reason(Resources(1, 3 * GiB), (), matrix, None)
    rack1 = (parse_constraint("rack=n1"),)
    reason = unplaceable_reason(Resources(1, 3 * GiB), rack1, matrix, EligibleCache().eligible(rack1, matrix))
    assert "the most free is 2Gi on n1" in reason and "among nodes matching" in reason
    matrix.set_schedulable("n1", False)
    matrix.set_schedulable("n2", False)
    assert unplaceable_reason(Resources(1), (), matrix, None) == "no nodes are ready"
    caps = [(n.name, n.capacity) for n in nodes]
    reason = never_fits_reason(Resources(1, 64 * GiB), caps)
    assert reason and "resources.memory" in reason and "n2" in reason and "4Gi" in reason
    assert never_fits_reason(Resources(3, 3 * GiB), caps) and "together" in never_fits_reason(Resources(3, 3 * GiB), caps)
    assert never_fits_reason(Resources(1, GiB), caps) is None
    assert never_fits_reason(Resources(99), []) is None   # no nodes known yet: accept and wait


def _jobs(specs: list[tuple[float, int, int]]) -> tuple[dict[str, Job], dict[str, list[Task]]]:
    jobs, tasks = {}, {}
    for i, (cpu, mem_gib, count) in enumerate(specs):
        jid = f"j{i}"
        jobs[jid] = Job(jid, JobSpec(("x",), Resources(cpu, mem_gib * GiB), tasks=count), submitted_at=float(i))
        tasks[jid] = [Task(jid, k) for k in range(count)]
    return jobs, tasks


@given(
    st.lists(st.tuples(st.floats(0.1, 8), st.integers(0, 16), st.integers(1, 6)), min_size=1, max_size=8),
    st.lists(st.tuples(st.floats(1, 16), st.integers(1, 32)), min_size=1, max_size=5),
    st.integers(0, 2**32),
)
def test_a_round_never_oversubscribes_and_is_deterministic(specs, caps, seed) -> None:  # type: ignore[no-untyped-def]
    jobs, tasks = _jobs(specs)
    nodes = [_node(f"n{i}", c, m) for i, (c, m) in enumerate(caps)]
    matrix = NodeMatrix()
    for n in nodes:
        matrix.upsert(n.name, n.capacity, {})
    before = matrix.view().free.copy()
    first = schedule_round(jobs, tasks, matrix, FifoPolicy(), FirstFit(), random.Random(seed))
    again = schedule_round(jobs, tasks, matrix, FifoPolicy(), FirstFit(), random.Random(seed))
    assert (matrix.view().free == before).all(), "a round leaves the matrix as it found it"
    assert [(t.id, n) for t, n in first.placements] == [(t.id, n) for t, n in again.placements]
    used = {n.name: Resources() for n in nodes}
    for task, node in first.placements:
        used[node] = used[node] + jobs[task.job_id].spec.resources
    for n in nodes:
        assert used[n.name].fits_in(n.capacity)
    assert len({t.id for t, _ in first.placements}) == len(first.placements)
    waiting = {t.job_id for ts in tasks.values() for t in ts} - {t.job_id for t, _ in first.placements}
    assert all(j in first.pending_reasons for j in waiting)


def test_a_round_returns_its_holds_as_a_plan_and_leaves_the_callers_ledger_alone() -> None:
    """Reservations are part of the plan: the caller adopts them; the round mutates nothing."""
    from tcluster.scheduler.reservations import Reservations
    matrix = NodeMatrix()
    matrix.upsert("n1", Resources(4, 8 * GiB), {})
    matrix.allocate("n1", Resources(3, GiB))           # a running task leaves 1 core free
    big = Job("big", JobSpec(("x",), Resources(2, GiB)), 0.0)
    book = Reservations(reserve_after_s=10)
    first = schedule_round({"big": big}, {"big": [Task("big", 0)]}, matrix, FifoPolicy(), FirstFit(),
                           random.Random(0), reservations=book, now=0.0)
    assert first.placements == [] and book.waiting_since == {} and first.holds is not None
    later = schedule_round({"big": big}, {"big": [Task("big", 0)]}, matrix, FifoPolicy(), FirstFit(),
                           random.Random(0), reservations=first.holds, now=11.0)
    assert later.holds is not None and [r.node for r in later.holds.held.values()] == ["n1"]
    assert first.holds.held == {}                         # the earlier plan is untouched


@given(st.integers(0, 2**16), st.integers(1, 30))
def test_largest_free_kept_through_a_round_is_the_full_scan(seed: int, nodes: int) -> None:
    rng = random.Random(seed)
    matrix = NodeMatrix(("cpu", "memory", "gpu"))
    for i in range(nodes):   # few shapes: maxima are often tied between nodes
        matrix.upsert(f"n{i:02d}", Resources(rng.choice([2, 4, 8]), rng.choice([1, 2]) * 2**30,
                                             (("gpu", float(rng.choice([0, 1, 2]))),)),
                      {}, schedulable=rng.random() > 0.2)
    view = matrix.view()
    most = LargestFree(view)
    with matrix.tentative():
        for step in range(3 * nodes):
            assert most.values() == [largest_free(view).get(kind) for kind in view.kinds]
            name = rng.choice([n for n in view.names if n is not None])
            matrix.allocate(name, Resources(rng.choice([0.5, 1, 2]), rng.choice([0, 2**28]),
                                            (("gpu", float(rng.choice([0, 1]))),)))
            before, first = most.values(), step == 0
            most.allocated(view.rows[name])
            assert most.changed == (first or most.values() != before)


class _ScanEveryTime:
    """The round before LargestFree: a full scan after every placement, always reported."""

    def __init__(self, view) -> None:  # type: ignore[no-untyped-def]
        self._view, self.changed = view, True

    def allocated(self, row: int) -> None:
        self.changed = True

    def resources(self) -> Resources:
        return largest_free(self._view)


@given(st.integers(0, 2**16), st.sampled_from(["mch", "drf"]), st.sampled_from(["anbf", "first-fit"]))
def test_a_round_with_largest_free_kept_decides_as_with_a_scan_after_each_placement(seed, fairness, placement) -> None:  # type: ignore[no-untyped-def]
    import tcluster.scheduler.round as round_module
    from tcluster.scheduler.fairness import make_fairness
    from tcluster.scheduler.placement import make_placement
    rng = random.Random(seed)
    nodes = [(f"n{i:02d}", rng.choice([2, 4, 8]), rng.choice([1, 2, 4]), rng.choice([0, 1, 2])) for i in range(rng.randint(1, 12))]
    jobs = {f"j{j}": Job(f"j{j}", JobSpec(("x",), Resources(rng.choice([0.5, 1, 3, 6]), rng.choice([1, 3]) * 2**29),
                                          tasks=rng.randint(1, 8)), float(j)) for j in range(rng.randint(1, 8))}
    results = []
    for keeper in (round_module.LargestFree, _ScanEveryTime):
        matrix = NodeMatrix()
        for name, cpu, gib, used in nodes:   # some nodes part used: the largest free starts below capacity
            matrix.upsert(name, Resources(cpu, gib * 2**30), {})
            matrix.allocate(name, Resources(used, used * 2**28))
        tasks = {j: [Task(j, k) for k in range(job.spec.tasks)] for j, job in jobs.items()}
        original, round_module.LargestFree = round_module.LargestFree, keeper
        try:
            result = schedule_round(jobs, tasks, matrix, make_fairness(fairness), make_placement(placement),
                                    random.Random(seed))
        finally:
            round_module.LargestFree = original
        results.append(([(t.id, n) for t, n in result.placements], result.pending_reasons))
    assert results[0] == results[1]
