"""Queue quotas (scheduler/quotas.py, scheduler/capbook.py): the keys and their errors,
and what the round starts under `max`, `borrow_limit`, `lend_limit` and
`max_running_per_user`, with the reason that names the cap."""

from __future__ import annotations

import random

import pytest

from tcluster.domain.model import Job, JobSpec, Task, TaskState
from tcluster.domain.resources import Resources
from tcluster.scheduler.capbook import CapBook, Holding, has_caps
from tcluster.scheduler.fairness import make_fairness
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import make_placement
from tcluster.scheduler.queues import QueueTree, parse_queue_text
from tcluster.scheduler.quotas import QueueCaps, job_user
from tcluster.scheduler.round import schedule_round
from tcluster.scheduler.yamlsrc import YamlConfigError

GiB = 2**30
CORE = Resources(cpu=1, memory=GiB)


def tree(text: str) -> QueueTree:
    return parse_queue_text("queues:\n" + text, "q.yaml")


def test_the_keys_parse_into_the_queues_caps() -> None:
    t = tree("  ads:\n    max: {cpu: 4, memory: 8Gi, gpu: 2}\n    borrow_limit: 0.1\n    lend_limit: 0.25\n"
             "    max_running_per_user: 3\n    max_pending_per_user: 100\n  dev: {}\n")
    caps = t.node("ads").caps      # type: ignore[union-attr]
    assert caps == QueueCaps((("cpu", 4.0), ("gpu", 2.0), ("memory", 8.0 * GiB)), 0.1, 0.25, 3, 100)
    assert caps.describe() == "max cpu=4 gpu=2 memory=8Gi; borrow_limit 0.1; lend_limit 0.25; "\
        "max_running_per_user 3; max_pending_per_user 100"
    assert t.node("dev").caps == QueueCaps() and not QueueCaps().any   # type: ignore[union-attr]
    assert has_caps(t) and not has_caps(tree("  a: {}\n"))
    assert not has_caps(tree("  a: {max_pending_per_user: 3}\n"))   # the submit's check, not the round's


@pytest.mark.parametrize("body, words", [
    ("{max: 4}", "q.yaml:2: queues.a.max: must be a mapping of resource amounts"),
    ("{max: {cpu: lots}}", "q.yaml:2: queues.a.max.cpu: "),
    ("{max: {memory: -1Gi}}", "q.yaml:2: queues.a.max.memory"),
    ("{max: {gpu: 1.5}}", "queues.a.max.gpu: 1.5 must be a whole number of GPUs"),
    ("{borrow_limit: 1.5}", "queues.a.borrow_limit: 1.5 must be a fraction of the cluster from 0 to 1"),
    ("{lend_limit: -0.1}", "queues.a.lend_limit: -0.1 must be a fraction"),
    ("{lend_limit: '10%'}", "queues.a.lend_limit: '10%' must be a fraction"),
    ("{max_running_per_user: 0}", "queues.a.max_running_per_user: 0 must be a whole number of tasks >= 1"),
    ("{max_pending_per_user: 2.5}", "queues.a.max_pending_per_user: 2.5 must be a whole number"),
    ("{max_runing_per_user: 2}", "queues.a.max_runing_per_user: unknown key; a queue has weight"),
])
def test_bad_quota_keys_are_refused_naming_the_field(body: str, words: str) -> None:
    with pytest.raises(YamlConfigError) as error:
        tree(f"  a: {body}\n")
    assert words in str(error.value)


def test_job_user_is_the_owner_else_the_unix_user() -> None:
    assert job_user(JobSpec(("x",), CORE, owner="alice", user="svc")) == "alice"
    assert job_user(JobSpec(("x",), CORE, user="svc")) == "svc"
    assert job_user(JobSpec(("x",), CORE)) == "anonymous"


# ---- the round ----

def cluster(nodes: int = 2, cpus: int = 2) -> NodeMatrix:
    matrix = NodeMatrix()
    for i in range(nodes):
        matrix.upsert(f"n{i}", Resources(cpu=cpus, memory=16 * GiB), {}, schedulable=True)
    return matrix


def job(job_id: str, queue: str, tasks: int, owner: str = "alice", at: float = 0.0,
        resources: Resources = CORE, gang: bool = False) -> tuple[Job, list[Task]]:
    spec = JobSpec(("x",), resources, queue=queue, tasks=tasks, owner=owner, gang=gang)
    return Job(job_id, spec, submitted_at=at), [Task(job_id, i) for i in range(tasks)]


def run(matrix: NodeMatrix, t: QueueTree, jobs: list[tuple[Job, list[Task]]],
        holdings: list[Holding] | None = None, fairness: str = "mch"):  # type: ignore[no-untyped-def]
    return schedule_round({j.id: j for j, _ in jobs}, {j.id: ts for j, ts in jobs}, matrix, make_fairness(fairness),
                          make_placement("first-fit"), random.Random(0), queues=t, holdings=holdings)


def placed_by_job(result) -> dict[str, int]:  # type: ignore[no-untyped-def]
    out: dict[str, int] = {}
    for task, _ in result.placements:
        out[task.job_id] = out.get(task.job_id, 0) + 1
    return out


@pytest.mark.parametrize("fairness", ["mch", "hdrf", "drf", "fifo"])
def test_max_holds_on_an_idle_cluster_and_names_the_cap(fairness: str) -> None:
    t = tree("  ads: {max: {cpu: 1}, queues: {prod: {}}}\n  dev: {}\n")
    result = run(cluster(), t, [job("a", "ads.prod", 3)], fairness=fairness)
    assert placed_by_job(result) == {"a": 1}
    assert result.pending_reasons["a"] == "queue ads at max cpu 1"


def test_max_counts_what_already_runs_and_a_sibling_is_not_held() -> None:
    t = tree("  ads: {max: {cpu: 3, memory: 2Gi}}\n  dev: {}\n")
    running = [Holding("ads", "bob", CORE, 1)]
    matrix = cluster()
    matrix.allocate("n0", CORE)                        # bob's task
    result = run(matrix, t, [job("a", "ads", 4), job("d", "dev", 4)], running)
    assert placed_by_job(result)["a"] == 1             # memory: 1 GiB held + 1 = 2 GiB
    assert result.pending_reasons["a"] == "queue ads at max memory 2Gi"
    assert placed_by_job(result)["d"] == 2             # the rest of the 4 cores


def test_a_gang_bigger_than_the_max_says_it_can_never_start() -> None:
    t = tree("  a: {max: {cpu: 2}}\n")
    result = run(cluster(), t, [job("g", "a", 3, gang=True)])
    assert result.placements == []
    assert result.pending_reasons["g"] == "queue a at max cpu 2; the job's tasks together ask for more: it can never start"


def test_borrow_limit_caps_at_guarantee_plus_the_limit() -> None:
    # a: guarantee 0.25 + borrow 0.25 -> at most 2 of 4 cores, though b is idle.
    t = tree("  a: {weight: 1, borrow_limit: 0.25}\n  b: {weight: 3}\n")
    result = run(cluster(), t, [job("a", "a", 4)])
    assert placed_by_job(result) == {"a": 2}
    assert result.pending_reasons["a"] == ("queue a at borrow_limit 0.25: cpu 2 held of 2 "
                                           "(guarantee 0.25 + 0.25 of the cluster)")


def test_lend_limit_keeps_the_unlent_part_of_the_guarantee_free() -> None:
    # b's guarantee is 0.75 (3 cores of 4); it lends at most 0.25: 2 cores stay free for b.
    t = tree("  a: {weight: 1}\n  b: {weight: 3, lend_limit: 0.25}\n")
    result = run(cluster(), t, [job("a", "a", 4)])
    assert placed_by_job(result) == {"a": 2}
    assert result.pending_reasons["a"].startswith("queue a may not borrow the room queue b keeps for itself "
                                                  "(lend_limit 0.25)")
    matrix = cluster()
    matrix.allocate("n0", Resources(cpu=2, memory=2 * GiB))   # a's two tasks
    later = run(matrix, t, [job("b", "b", 4)], [Holding("a", "alice", CORE, 2)])
    assert placed_by_job(later) == {"b": 2}             # b uses its kept room


def test_a_lender_inside_the_same_parent_keeps_room_from_cousins_only() -> None:
    t = tree("  ads: {queues: {prod: {}, test: {lend_limit: 0}}}\n  dev: {}\n")
    # ads.test's guarantee: 0.25 of 4 cores = 1 core kept for it; prod and dev share the other 3.
    result = run(cluster(), t, [job("p", "ads.prod", 4), job("d", "dev", 4)])
    assert sum(placed_by_job(result).values()) == 3


def test_max_running_per_user_counts_each_users_tasks() -> None:
    t = tree("  a: {max_running_per_user: 2}\n")
    result = run(cluster(), t, [job("x", "a", 3, "alice"), job("y", "a", 3, "bob"), job("z", "a", 1, "alice", 1.0)])
    placed = placed_by_job(result)
    assert placed.get("x", 0) + placed.get("z", 0) == 2 and placed["y"] == 2
    waiting = "x" if placed.get("x", 0) < 3 else "z"
    assert result.pending_reasons[waiting] == "user alice at max_running_per_user 2 in queue a"


def test_a_capped_job_gets_no_reservation() -> None:
    """A job that waited long but is held by its quota holds no node for itself."""
    from tcluster.scheduler.reservations import Reservations
    t = tree("  a: {max: {cpu: 1}}\n  b: {}\n")
    jobs = [job("a", "a", 2, resources=Resources(cpu=2, memory=GiB))]
    book = Reservations(1)
    matrix = cluster()
    first = schedule_round({j.id: j for j, _ in jobs}, {j.id: ts for j, ts in jobs}, matrix, make_fairness("mch"),
                           make_placement("first-fit"), random.Random(0), queues=t, reservations=book, now=0.0)
    later = schedule_round({j.id: j for j, _ in jobs}, {j.id: ts for j, ts in jobs}, matrix, make_fairness("mch"),
                           make_placement("first-fit"), random.Random(0), queues=t, reservations=first.holds, now=60.0)
    assert later.holds is not None and not later.holds.held
    assert later.pending_reasons["a"].startswith("queue a at max cpu 1")


def test_running_tasks_in_the_given_tasks_count_without_holdings() -> None:
    t = tree("  a: {max: {cpu: 2}}\n")
    j, tasks = job("a", "a", 3)
    tasks[0] = Task("a", 0, TaskState.RUNNING, node="n0")
    tasks[1] = Task("a", 1, TaskState.RUNNING, node="n0")
    result = schedule_round({"a": j}, {"a": tasks}, cluster(), make_fairness("mch"), make_placement("first-fit"),
                            random.Random(0), queues=t)
    assert result.placements == [] and result.pending_reasons["a"] == "queue a at max cpu 2"


def test_the_book_counts_starts_up_the_tree() -> None:
    t = tree("  ads: {max: {cpu: 2}, queues: {prod: {max_running_per_user: 5}, test: {}}}\n")
    book = CapBook(t, [Holding("ads.test", "bob", CORE, 1)], Resources(cpu=8, memory=64 * GiB))
    assert book.blocks("ads.prod", "alice", CORE, 1) is None
    book.add("ads.prod", "alice", CORE)
    assert book.blocks("ads.prod", "alice", CORE, 1) == "queue ads at max cpu 2"
    assert book.user_running[("ads.prod", "alice")] == 1
    assert book.blocks("elsewhere", "alice", CORE, 1) is None     # a queue no longer in the file


# ---- the submit's max_pending_per_user (master/features/quotas_live.py) ----

def _state(jobs: list[tuple[Job, list[Task]]]):  # type: ignore[no-untyped-def]
    from tcluster.master.core.state import MasterState, Timeouts
    return MasterState([j for j, _ in jobs], [t for _, ts in jobs for t in ts], [], [], Timeouts(), 0.0)


def test_max_pending_per_user_counts_the_users_waiting_tasks_in_the_subtree() -> None:
    from tcluster.domain.errors import ResourceExhausted
    from tcluster.master.features.quotas_live import check_pending_cap, running_holdings
    t = tree("  ads: {max_pending_per_user: 5, queues: {prod: {}, test: {max_pending_per_user: 10}}}\n")
    j1, tasks1 = job("j1", "ads.prod", 3, "alice")
    tasks1[0] = Task("j1", 0, TaskState.RUNNING, node="n0")       # started: no longer waiting
    state = _state([(j1, tasks1), job("j2", "ads.test", 2, "alice"), job("j3", "ads.prod", 4, "bob")])
    assert sorted((h.queue, h.user, h.running) for h in running_holdings(state)) == [("ads.prod", "alice", 1)]
    check_pending_cap(state, t, JobSpec(("x",), CORE, queue="ads.test", tasks=1, owner="alice"))   # 2 + 2 + 1
    with pytest.raises(ResourceExhausted) as refused:
        check_pending_cap(state, t, JobSpec(("x",), CORE, queue="ads.test", tasks=2, owner="alice"))
    assert str(refused.value) == ("queue ads: user alice at max_pending_per_user 5: 4 task(s) already waiting, "
                                  "this job adds 2; submit again when some have started")
    with pytest.raises(ResourceExhausted, match="user alice at max_pending_per_user 5: 4 task"):
        check_pending_cap(state, t, JobSpec(("x",), CORE, queue="ads.prod", array="0-1", owner="alice"))
    check_pending_cap(state, t, JobSpec(("x",), CORE, queue="ads.prod", tasks=1, owner="bob"))      # 4 + 1
