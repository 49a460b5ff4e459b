"""Gangs in the scheduling round (scheduler/gangs.py): all of a gang's tasks in one round
or none, nothing left allocated by a gang that did not fit, its hold after the wait, and
two gangs each needing 60% of the cluster both running, one after the other."""

from __future__ import annotations

import random

from tcluster.domain.model import Job, JobSpec, Task, TaskState
from tcluster.domain.resources import Resources
from tcluster.scheduler.fairness import make_fairness
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import make_placement
from tcluster.scheduler.reservations import Reservations
from tcluster.scheduler.round import schedule_round

ONE = Resources(cpu=1, memory=0)


def cluster(n: int = 5) -> NodeMatrix:
    matrix = NodeMatrix()
    for i in range(n):
        matrix.upsert(f"n{i}", Resources(cpu=1, memory=2**30), {}, schedulable=True)
    return matrix


def gang(job_id: str, size: int, at: float = 0.0) -> tuple[Job, list[Task]]:
    return Job(job_id, JobSpec(("x",), ONE, tasks=size, gang=True), submitted_at=at), \
        [Task(job_id, i) for i in range(size)]


def round_(matrix: NodeMatrix, jobs: dict[str, tuple[Job, list[Task]]], book: Reservations, now: float):
    return schedule_round({k: v[0] for k, v in jobs.items()}, {k: v[1] for k, v in jobs.items()}, matrix,
                          make_fairness("drf"), make_placement("first-fit"), random.Random(0),
                          reservations=book, now=now)


def test_all_or_none_and_nothing_left_allocated() -> None:
    matrix = cluster(5)
    matrix.allocate("n0", ONE)
    matrix.allocate("n1", ONE)
    result = round_(matrix, {"g": gang("g", 4)}, Reservations(30), 0.0)
    assert result.placements == [] and "gang: its 4 tasks do not all fit at once now" in result.pending_reasons["g"]
    assert matrix.free("n2").cpu == 1 and matrix.free("n4").cpu == 1
    assert len(round_(matrix, {"g": gang("g", 3)}, Reservations(30), 0.0).placements) == 3


def test_two_gangs_of_sixty_percent_run_one_after_the_other() -> None:
    """Each needs 3 of 5 nodes; a stream of small tasks would keep 3 from ever being free
    together, so the first gang to wait long enough holds, the second does not also hold."""
    matrix = cluster(5)
    for node in ("n0", "n1", "n2"):
        matrix.allocate(node, ONE)            # busy with others' tasks for now
    book = Reservations(30)
    jobs = {"g1": gang("g1", 3, 0.0), "g2": gang("g2", 3, 1.0)}
    first = round_(matrix, jobs, book, 0.0)
    book = first.holds
    later = round_(matrix, jobs, book, 31.0)
    holders = {r.job_id for r in later.holds.held.values()}
    assert holders == {"g1"} and len(later.holds.held) == 3          # one gang holds, the nodes it needs
    assert "are held for it" in later.pending_reasons["g1"]
    for node in ("n0", "n1", "n2"):
        matrix.release(node, ONE)             # the others' tasks end
    done = round_(matrix, jobs, later.holds, 32.0)
    assert sorted(t.job_id for t, _ in done.placements) == ["g1", "g1", "g1"]
    for task, node in done.placements:
        matrix.allocate(node, ONE)
    jobs["g1"] = (jobs["g1"][0], [Task("g1", i, TaskState.RUNNING) for i in range(3)])
    assert round_(matrix, jobs, done.holds, 33.0).placements == []      # g2 waits for g1 to end
    for _, node in done.placements:
        matrix.release(node, ONE)
    del jobs["g1"]
    assert len(round_(matrix, jobs, done.holds, 40.0).placements) == 3


def test_a_gang_with_running_members_waits_for_them_to_stop() -> None:
    matrix = cluster(3)
    job, _ = gang("g", 3)
    tasks = [Task("g", 0, TaskState.RUNNING, node="n0"), Task("g", 1), Task("g", 2)]
    result = schedule_round({"g": job}, {"g": tasks}, matrix, make_fairness("drf"), make_placement("first-fit"),
                            random.Random(0))
    assert result.placements == [] and "running task(s) to stop" in result.pending_reasons["g"]


def test_a_gang_that_did_not_fit_leaves_its_nodes_to_the_next_job_under_anbf() -> None:
    """anbf keeps its scores within a round; the rows a failed gang gave back are scored
    again (before, they stayed taken for the rest of the round: a waiting gang starved
    every job fairness offered after it)."""
    matrix = cluster(5)
    matrix.allocate("n0", ONE)
    g, g_tasks = gang("g", 5, at=0.0)
    small = Job("s", JobSpec(("x",), ONE, tasks=4), submitted_at=1.0)
    result = schedule_round({"g": g, "s": small}, {"g": g_tasks, "s": [Task("s", i) for i in range(4)]}, matrix,
                            make_fairness("fifo"), make_placement("anbf"), random.Random(0),
                            reservations=Reservations(30), now=0.0)
    assert sorted(node for task, node in result.placements if task.job_id == "s") == ["n1", "n2", "n3", "n4"]
    assert "do not all fit" in result.pending_reasons["g"]
