"""Megha's Alg. 2 (federation/fairness.py): who may preempt, whom, and where; and the
simulator's invariants with preemption on."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from tcluster.federation.fairness import FairPreempter, dominant
from tcluster.federation.gm import GlobalManager, NoRoom, Send
from tcluster.federation.lm import LocalManager
from tcluster.federation.messages import (
    InternalLaunch, TaskLaunched, LMLayout, LMNode, PreemptAndLaunch, RepartitionAndLaunch, TaskRequest,
)
from tcluster.sim.federation.sim import FedConfig, simulate
from tcluster.sim.federation.workload import WorkloadSpec

from tests.unit.test_federation_sim import check_ledger

A = 1
# One LM, four 4-core nodes: GM 0 owns nodes 0 and 2, GM 1 owns 1 and 3; node 3 lacks A.
LAYOUT = LMLayout(0, tuple(LMNode((4, 100), m) for m in (A, A, A, 0)), (0, 1, 0, 1))
SHARES = {"mine": 0.5, "hog": 0.1, "other": 0.4}


def t(tid: str, cores: int, queue: str, pc: int = 0) -> TaskRequest:
    return TaskRequest(tid, queue, (cores, 1), pc)


def setup(hog: list[tuple[str, int, int]], other: list[tuple[str, int, int]] = ()) -> tuple[LocalManager, GlobalManager]:
    """GM 1 runs `hog` and `other` tasks as (id, node, cores), in that order; GM 0 asks."""
    lm = LocalManager(LAYOUT, publish_tasks=True)
    for queue, runs in (("hog", hog), ("other", other)):
        for tid, node, cores in runs:
            task = t(tid, cores, queue)
            req = InternalLaunch(f"{tid}:0", 1, 1, node, task) if LAYOUT.owner[node] == 1 else \
                RepartitionAndLaunch(f"{tid}:0", 1, 1, 0, node, task)
            answer, _ = lm.handle(req)
            assert isinstance(answer, TaskLaunched), answer
    gm = GlobalManager(0, [LAYOUT], 2, ["mine"], preempter=FairPreempter(SHARES))
    gm.on_state(lm.state())
    return lm, gm


def test_dominant_share_is_the_largest_fraction() -> None:
    assert dominant((2, 10), (8, 100)) == 0.25 and dominant((0, 0), (8, 0)) == 0.0


def test_fewest_youngest_victims_of_the_most_violating_queue_on_a_node_with_the_constraints() -> None:
    # "hog" holds 12 of 16 cores (75% > 10%); "other" 2 (12.5% < 40%). Node 3 lacks A.
    lm, gm = setup(hog=[("h1", 1, 2), ("h2", 1, 2), ("h3", 3, 4), ("h4", 0, 4)], other=[("o1", 2, 2)])
    gm.views[0].free[2] = (0, 100)      # GM 0's own nodes look full
    gm.submit(t("x", 3, "mine", pc=A))
    d = gm.decide()
    assert isinstance(d, Send) and isinstance(d.request, PreemptAndLaunch)
    # Node 0 needs one victim (h4, 4 cores) and has A; node 1 needs two; node 3 lacks A.
    assert (d.request.node, d.request.victims) == (0, ("h4",))
    answer, notices = lm.handle(d.request)
    assert isinstance(answer, TaskLaunched) and [n[1].task_id for n in notices] == ["h4"]
    gm.on_answer(answer)
    assert gm.stats.preemptions == 1


def test_youngest_first_within_a_node() -> None:
    lm, gm = setup(hog=[("old", 1, 2), ("young", 1, 2)])
    for node in (0, 2):
        gm.views[0].free[node] = (0, 100)
    gm.views[0].free[3] = (0, 100)
    gm.submit(t("x", 2, "mine"))
    d = gm.decide()
    assert isinstance(d.request, PreemptAndLaunch) and d.request.victims == ("young",)


def test_a_requester_over_its_share_preempts_nobody() -> None:
    lm, gm = setup(hog=[("h1", 1, 4), ("h2", 3, 4)])
    gm.submit(t("x", 9, "mine"))        # 9 of 16 cores would put "mine" over its 50%
    for node in range(4):
        gm.views[0].free[node] = (0, 100)
    assert isinstance(gm.decide(), NoRoom)


def test_no_queue_over_its_share_means_no_victims() -> None:
    lm, gm = setup(hog=[("h1", 1, 1)])  # 6.25%: under its 10%
    for node in range(4):
        gm.views[0].free[node] = (0, 100)
    gm.submit(t("x", 2, "mine"))
    assert isinstance(gm.decide(), NoRoom)


def test_a_preempted_task_returns_to_the_head_of_its_queue_with_a_new_attempt() -> None:
    lm = LocalManager(LAYOUT, publish_tasks=True)
    victim_gm = GlobalManager(1, [LAYOUT], 2, ["hog"])
    victim_gm.on_state(lm.state())
    victim_gm.submit(t("h", 4, "hog"))
    victim_gm.submit(t("later", 1, "hog"))
    victim_gm.on_answer(lm.handle(victim_gm.decide().request)[0])
    answer, notices = lm.handle(PreemptAndLaunch("x:0", 0, 1, 1, ("h",), t("x", 4, "mine")))
    assert isinstance(answer, TaskLaunched)
    ((g, delta),) = notices
    victim_gm.on_delta(delta)
    head = victim_gm.queues["hog"].items[0]
    assert g == 1 and head.task.task_id == "h" and head.attempt == 1 and "h" not in victim_gm.running


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lms=st.integers(1, 2), gms=st.integers(2, 3), workers=st.integers(2, 6), tasks=st.integers(5, 40),
       load=st.floats(1.0, 2.5), seed=st.integers(0, 2**16))
def test_with_preemption_nothing_overcommits_and_every_task_ends_once(lms, gms, workers, tasks, load, seed) -> None:
    cfg = FedConfig(lms=lms, gms=gms, workers=max(workers, lms), queues_per_gm=2, preemption=True, seed=seed)
    run = simulate(cfg, WorkloadSpec(tasks=tasks, load=load, mean_duration_s=2.0))
    check_ledger(run)                   # no overcommit, K8, nothing left holding room
    assert all(rec.end is not None for rec in run.records.values())
    preempted = sum(s.preemptions for s in run.gm_stats)
    assert sum(run.launches.values()) == tasks + preempted


def test_the_requesters_requests_in_flight_count_toward_its_share() -> None:
    # tcl-gm keeps one request in flight per LM: those of the requesting queue may launch, so
    # they count as its usage. "mine" asks for 3 cores with 6 in flight: 9 of 16 > its 50%.
    from tcluster.federation.gm import Pending
    _, gm = setup(hog=[("h1", 1, 2), ("h2", 1, 2), ("h3", 3, 4), ("h4", 0, 4)])
    gm.views[0].free[2] = (0, 100)
    x = t("x", 3, "mine", pc=A)
    assert isinstance(gm.preempter(gm, x, "x:0"), Send)
    flying = t("f", 6, "mine")
    gm.in_flight[1] = (Pending(flying), "mine", InternalLaunch("f:0", 0, 1, 2, flying))
    assert gm.preempter(gm, x, "x:0") is None
