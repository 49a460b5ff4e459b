"""Megha's GM (federation/gm.py, federation/view.py): Alg. 1 on hand-made partitions, and
what the GM does with each LM answer."""

from __future__ import annotations

from tcluster.federation.gm import GlobalManager, NoRoom, Pending, Send
from tcluster.federation.lm import LocalManager
from tcluster.federation.messages import (
    Inconsistent, InconsistencyKind, InternalLaunch, TaskLaunched, LMLayout, LMNode, RepartitionAndLaunch, TaskRequest, Why,
)
from tcluster.federation.view import Partition, match_task, split

A, B = 1 << 0, 1 << 1          # two constraints


def layout(lm: int, nodes: list[tuple[int, int]], owner: list[int]) -> LMLayout:
    """Nodes as (cores, cmask) with 100 MB each; owner[i] is node i's GM."""
    return LMLayout(lm, tuple(LMNode((c, 100), m) for c, m in nodes), tuple(owner))


def task(tid: str = "t", cores: int = 1, pc: int = 0, queue: str = "q0") -> TaskRequest:
    return TaskRequest(tid, queue, (cores, 10), pc)


def test_partitions_are_an_equal_interleaved_split() -> None:
    nodes = tuple(LMNode((4, 100), 0) for _ in range(7))
    assert split(0, nodes, 3).owner == (0, 1, 2, 0, 1, 2, 0)


def test_match_ands_the_constraint_vectors_and_takes_the_first_fit() -> None:
    lay = layout(0, [(4, A), (8, A | B), (2, A | B), (8, A | B), (8, B)], [0] * 5)
    part = Partition.of(lay, 0, 2)
    assert part.bitvec == (0b01111, 0b11110)
    free = [n.cap for n in lay.nodes]
    assert match_task(part, free, (1, 10), A | B) == 1          # first with both bits
    assert match_task(part, free, (4, 10), 0) == 0              # no constraint: node 0 fits
    free[1] = (0, 100)
    assert match_task(part, free, (4, 10), A | B) == 3          # node 2 too small, node 1 full
    assert match_task(part, free, (9, 10), A) == -1
    assert match_task(part, free, (1, 10), 1 << 5) == -1        # a constraint no node has


def test_match_only_looks_inside_the_partition() -> None:
    lay = layout(0, [(8, A), (8, 0), (8, A)], [1, 0, 0])
    part = Partition.of(lay, 0, 1)
    assert part.nodes == (1, 2)
    assert match_task(part, [n.cap for n in lay.nodes], (1, 1), A) == 2


def two_lms() -> list[LMLayout]:
    # LM 0: GM 0 owns node 0 (2 cores), GM 1 owns node 1 (8). LM 1 likewise.
    return [layout(0, [(2, A), (8, A)], [0, 1]), layout(1, [(2, A), (8, A)], [0, 1])]


def synced(gm: GlobalManager, lms: list[LocalManager]) -> GlobalManager:
    """A GM starts from one full state of every LM (it learns their epochs there)."""
    for lm in lms:
        gm.on_state(lm.state())
    return gm


def test_internal_partitions_round_robin_across_lms() -> None:
    gm = GlobalManager(0, two_lms(), 2, ["q0"])
    sent = []
    for i in range(4):
        gm.submit(task(f"t{i}"))
        d = gm.decide()
        assert isinstance(d, Send) and isinstance(d.request, InternalLaunch)
        sent.append((d.lm, d.request.node))
        gm.in_flight.clear()     # as if answered; the view keeps the debit
    assert sent == [(0, 0), (1, 0), (0, 0), (1, 0)]


def test_external_partitions_after_internal_ones_then_no_room() -> None:
    gm = GlobalManager(0, two_lms(), 2, ["q0"])
    gm.submit(task("big", cores=5))
    d = gm.decide()
    assert isinstance(d, Send) and isinstance(d.request, RepartitionAndLaunch)
    assert (d.lm, d.request.src, d.request.node) == (0, 1, 1)
    gm.in_flight.clear()
    gm.submit(task("big2", cores=5))
    d = gm.decide()
    assert isinstance(d, Send) and d.lm == 1       # external round-robin moved on to LM 1
    gm.in_flight.clear()
    gm.submit(task("huge", cores=9))
    assert isinstance(gm.decide(), NoRoom)
    assert gm.decide() is None                     # nothing new to try on this view
    assert gm.pending() == 1


def test_no_repartition_means_no_room_outside_own_partitions() -> None:
    gm = GlobalManager(0, two_lms(), 2, ["q0"], repartition=False)
    gm.submit(task("big", cores=5))
    assert isinstance(gm.decide(), NoRoom)


def test_a_no_room_task_is_tried_again_when_the_view_changes() -> None:
    lays = two_lms()
    gm = GlobalManager(0, lays, 2, ["q0"], repartition=False)
    lm = LocalManager(lays[0])
    gm.on_state(lm.state())
    gm.submit(task("a", cores=2))
    gm.submit(task("b", cores=2))
    gm.submit(task("c", cores=2))
    assert isinstance(gm.decide(), Send)
    gm.in_flight.clear()
    assert isinstance(gm.decide(), Send)
    gm.in_flight.clear()
    assert isinstance(gm.decide(), NoRoom) and gm.decide() is None
    lm.fail_over()                                 # any newer state wakes the queue
    gm.on_state(lm.state())
    assert gm.decide() is not None


def test_an_inconsistency_adopts_the_lm_state_and_requeues_at_the_head() -> None:
    lays = two_lms()
    lm = LocalManager(lays[0])
    other = synced(GlobalManager(1, lays, 2, ["q1"]), [lm])
    gm = synced(GlobalManager(0, lays, 2, ["q0"]), [lm])
    # GM 1 repartitions node 0 of LM 0 (GM 0's) behind GM 0's back.
    other.submit(task("x", cores=2, queue="q1"))
    other.views[1].free[1] = (0, 0)
    other.views[1].free[0] = (0, 0)
    other.views[0].free[1] = (0, 0)
    d = other.decide()
    assert isinstance(d, Send) and isinstance(d.request, RepartitionAndLaunch) and d.request.node == 0
    assert isinstance(lm.handle(d.request)[0], TaskLaunched)
    gm.submit(task("a"))
    gm.submit(task("b"))
    d = gm.decide()
    assert isinstance(d, Send) and (d.lm, d.request.node) == (0, 0)
    answer, _ = lm.handle(d.request)
    assert isinstance(answer, Inconsistent) and answer.kind is InconsistencyKind.INTERNAL
    gm.on_answer(answer)
    assert gm.views[0].free[0] == (0, 90) and gm.stats.internal_inconsistencies == 1
    head = gm.queues["q0"].items[0]
    assert head.task.task_id == "a" and head.attempt == 1
    d = gm.decide()                                # the same task first, a new request id, LM 1
    assert isinstance(d, Send) and d.request.request_id == "a:1" and d.lm == 1


def test_success_records_the_task_and_a_late_copy_is_ignored() -> None:
    lays = two_lms()
    lm = LocalManager(lays[0])
    gm = synced(GlobalManager(0, lays, 2, ["q0"]), [lm])
    gm.submit(task("a"))
    d = gm.decide()
    assert gm.views[0].free[0] == (1, 90)          # debited at send time
    answer, _ = lm.handle(d.request)
    gm.on_answer(answer)
    gm.on_answer(answer)
    assert gm.running["a"][:2] == (0, 0) and gm.stats.launches == 1 and gm.pending() == 0
    assert gm.views[0].version == lm.version
    assert gm.views[0].free[0] == (1, 90)


def test_an_older_state_never_rolls_the_view_back() -> None:
    lays = two_lms()
    lm = LocalManager(lays[0])
    gm = synced(GlobalManager(0, lays, 2, ["q0"]), [lm])
    old = lm.state()
    gm.submit(task("a"))
    gm.on_answer(lm.handle(gm.decide().request)[0])
    gm.on_state(old)                               # a periodic update that left before the launch
    assert gm.views[0].free[0] == (1, 90)


def test_a_delta_about_one_node_does_not_hide_a_newer_full_state() -> None:
    lays = two_lms()
    lm = LocalManager(lays[0])
    gm = synced(GlobalManager(0, lays, 2, ["q0"]), [lm])
    gm.submit(task("a"))
    gm.on_answer(lm.handle(gm.decide().request)[0])          # node 0: version 1
    lm.handle(InternalLaunch("y:0", 1, 1, 1, task("y", 8)))             # node 1 fills: version 2
    stale = lm.state()
    _, delta = lm.end("a")                                      # node 0 frees: version 3
    gm.on_delta(delta)
    assert gm.views[0].free[0] == (2, 100) and gm.views[0].free[1] == (8, 100)
    gm.on_state(stale)                                          # older than the delta, newer than the view
    assert gm.views[0].free == [(2, 100), (0, 90)]
    gm.on_state(lm.state())
    assert gm.views[0].version == 3 and gm.views[0].node_news == {}


# ---- one request in flight per LM (tcl-gm: max_in_flight = number of LMs) ----

def test_one_request_in_flight_per_lm_and_no_more_than_the_limit() -> None:
    lays = two_lms()
    lms = [LocalManager(lay) for lay in lays]
    gm = synced(GlobalManager(0, lays, 2, ["q0"], max_in_flight=2), lms)
    for i in range(3):
        gm.submit(task(f"t{i}"))
    first, second = gm.decide(), gm.decide()
    assert isinstance(first, Send) and isinstance(second, Send) and {first.lm, second.lm} == {0, 1}
    assert gm.decide() is None and set(gm.in_flight) == {0, 1} and gm.pending() == 3
    answer = lms[1].handle(second.request)[0]
    gm.on_answer(answer)                                  # LM 1 answers first: only its slot frees
    assert set(gm.in_flight) == {0} and gm.running["t1"][0] == 1
    third = gm.decide()
    assert isinstance(third, Send) and third.lm == 1 and set(gm.in_flight) == {0, 1}
    gm.on_answer(answer)                                  # a late copy: LM 1's new request stays awaited
    assert set(gm.in_flight) == {0, 1} and gm.stats.launches == 1


def test_a_task_with_room_only_at_a_busy_lm_waits_while_other_queues_go_on() -> None:
    # LM 0's node of GM 0 has constraints A and B, LM 1's only A.
    lays = [layout(0, [(2, A | B), (8, A)], [0, 1]), layout(1, [(2, A), (8, A)], [0, 1])]
    lms = [LocalManager(lay) for lay in lays]
    gm = synced(GlobalManager(0, lays, 2, ["q0", "q1"], repartition=False, max_in_flight=2), lms)
    gm.submit(task("a", pc=B, queue="q1"))
    sent_a = gm.decide()
    assert isinstance(sent_a, Send) and sent_a.lm == 0
    gm.submit(task("x", pc=B, queue="q0"))                 # fits LM 0 only, which is busy
    gm.submit(task("y", pc=A, queue="q1"))
    sent_y = gm.decide()
    assert isinstance(sent_y, Send) and sent_y.lm == 1 and sent_y.request.task.task_id == "y"
    assert gm.queues["q0"].items[0].task.task_id == "x" and gm.stats.no_room == 0   # waiting, not parked
    gm.on_answer(lms[0].handle(sent_a.request)[0])
    sent_x = gm.decide()
    assert isinstance(sent_x, Send) and sent_x.lm == 0 and sent_x.request.request_id == "x:0"


def test_forget_frees_the_lms_slot_and_keeps_the_debit() -> None:
    lays = two_lms()
    gm = synced(GlobalManager(0, lays, 2, ["q0"], max_in_flight=2), [LocalManager(lay) for lay in lays])
    gm.submit(task("a"))
    d = gm.decide()
    p, queue, request = gm.forget(d.lm)
    assert p.task.task_id == "a" and queue == "q0" and request == d.request
    assert gm.in_flight == {} and gm.forget(d.lm) is None and gm.views[d.lm].free[0] == (1, 90)


def test_the_limit_in_all_holds_below_the_number_of_lms() -> None:
    lays = [layout(i, [(2, A), (8, A)], [0, 1]) for i in range(3)]
    gm = synced(GlobalManager(0, lays, 2, ["q0"], max_in_flight=2), [LocalManager(lay) for lay in lays])
    for i in range(3):
        gm.submit(task(f"t{i}"))
    assert isinstance(gm.decide(), Send) and isinstance(gm.decide(), Send)
    assert gm.decide() is None and len(gm.in_flight) == 2        # LM 2 is free, but two are in flight


def test_a_busy_lms_internal_room_is_waited_for_before_repartitioning_or_preempting() -> None:
    # LM 0 has internal room but a request in flight; LM 1 has only external room (GM 1's
    # node), and a preempter would preempt there: Alg. 1's order says wait for LM 0.
    lays = [layout(0, [(4, A), (8, A)], [0, 1]), layout(1, [(2, A), (8, A)], [0, 1])]
    lms = [LocalManager(lay) for lay in lays]
    calls: list[str] = []

    def preempter(gm: GlobalManager, t: object, request_id: str) -> Send | None:
        calls.append(request_id)
        return None
    gm = synced(GlobalManager(0, lays, 2, ["q0"], max_in_flight=2, preempter=preempter), lms)
    gm.views[1].free[0] = (0, 100)                      # LM 1's node of GM 0 is full
    gm.submit(task("a", cores=2))
    gm.submit(task("b", cores=2))
    first = gm.decide()
    assert isinstance(first, Send) and first.lm == 0 and isinstance(first.request, InternalLaunch)
    assert gm.decide() is None and calls == [] and gm.stats.no_room == 0    # b waits for LM 0
    gm.on_answer(lms[0].handle(first.request)[0])
    second = gm.decide()
    assert isinstance(second, Send) and second.lm == 0 and isinstance(second.request, InternalLaunch)


def test_no_second_preemption_while_one_is_in_flight() -> None:
    from tcluster.federation.messages import PreemptAndLaunch
    lays = two_lms()
    calls: list[str] = []

    def preempter(gm: GlobalManager, t: TaskRequest, request_id: str) -> Send | None:
        calls.append(request_id)
        return Send(len(calls) - 1, PreemptAndLaunch(request_id, 0, 1, 0, ("v",), t))
    gm = GlobalManager(0, lays, 2, ["q0"], repartition=False, max_in_flight=2, preempter=preempter)
    for lm in range(2):
        gm.views[lm].free[0] = (0, 100)                 # no room anywhere: only preemption
    gm.submit(task("a", cores=2))
    gm.submit(task("b", cores=2))
    first = gm.decide()
    assert isinstance(first, Send) and isinstance(first.request, PreemptAndLaunch)
    assert gm.decide() is None and calls == ["a:0"]    # b waits: a's victims' room is not in the view yet


def test_a_late_answer_is_taken_as_an_answer_in_flight_would_be() -> None:
    # tcl-gm forgets a request whose answer did not come and sends it again with the same id;
    # the answer to that resend is taken like any other (stats, running, requeue at the head).
    lays = two_lms()
    lms = [LocalManager(lay) for lay in lays]
    gm = synced(GlobalManager(0, lays, 2, ["q0"], max_in_flight=2), lms)
    gm.submit(task("a"))
    gm.submit(task("b"))
    sent_a, sent_b = gm.decide(), gm.decide()
    (pa, qa, _), (pb, qb, _) = gm.forget(sent_a.lm), gm.forget(sent_b.lm)
    gm.on_late_answer(lms[sent_a.lm].handle(sent_a.request)[0], pa, qa)
    assert gm.running["a"][0] == sent_a.lm and gm.stats.launches == 1
    gm.on_late_answer(lms[sent_b.lm].handle(sent_b.request)[0], pb, qb, ended=True)   # its end came first
    assert "b" not in gm.running and gm.stats.launches == 2 and gm.pending() == 0
    stale = Inconsistent("c:0", "c", sent_a.lm, InconsistencyKind.INTERNAL, Why.INSUFFICIENT, lms[sent_a.lm].state())
    pc = Pending(task("c"))
    gm.on_late_answer(stale, pc, "q0")
    assert gm.queues["q0"].items[0] is pc and pc.attempt == 1 and gm.stats.internal_inconsistencies == 1
