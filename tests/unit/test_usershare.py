"""The user level inside a leaf queue (`share: users`): the queue key, each policy's
picks as tables, and the simulator's property that splitting work into many jobs gains
a user nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tcluster.domain.resources import Resources
from tcluster.scheduler.fairness import make_fairness
from tcluster.scheduler.queues import QueueTree, parse_queue_text
from tcluster.scheduler.usershare import HeldIndex, held_of
from tcluster.scheduler.views import JobView
from tcluster.scheduler.yamlsrc import YamlConfigError
from tcluster.sim.engine import simulate
from tcluster.sim.report import user_shares
from tcluster.sim.scenario import parse_scenario

POLICIES = ["drf", "hdrf", "mch"]


def tree(share: str = "") -> QueueTree:
    key = f", share: {share}" if share else ""
    return parse_queue_text(f"queues:\n  lab: {{weight: 1{key}}}\n  other: {{weight: 1}}\n", "q.yaml")


def picks(policy: str, views: list[JobView], capacity: Resources, queues: QueueTree,
          held: dict[tuple[str, str], Resources] | None = None) -> dict[str, int]:
    """Tasks placed per job until the cluster is full (every task fits anywhere)."""
    rnd = make_fairness(policy).start_round(views, capacity, queues, held)
    demand = {v.job_id: v.demand for v in views}
    free, placed = capacity, {v.job_id: 0 for v in views}
    for taken in (held or {}).values():
        free = free - taken
    while (job_id := rnd.next_job()) is not None:
        if not demand[job_id].fits_in(free):
            rnd.skip(job_id)
            continue
        free = free - demand[job_id]
        placed[job_id] += 1
        rnd.placed(job_id)
    return placed


def split_views(alice_jobs: int = 8, bob_tasks: int = 8) -> list[JobView]:
    """Bob's one array first (the tie-break would favour him), then alice's one-task jobs."""
    one = Resources(1, 10**9)
    views = [JobView("bob", "lab", 0.0, one, bob_tasks, 0, 1.0, "bob")]
    views += [JobView(f"a{i}", "lab", 1.0 + i, one, 1, 0, 1.0, "alice") for i in range(alice_jobs)]
    return views


def by_user(placed: dict[str, int]) -> tuple[int, int]:
    return sum(n for j, n in placed.items() if j.startswith("a")), placed.get("bob", 0)


@pytest.mark.parametrize("text, shares_users", [
    ("queues: {lab: {}}", True),                                             # the default
    ("queues: {lab: {share: jobs}}", False),
    ("queues: {ads: {share: jobs, queues: {prod: {}}}}", False),              # inherited
    ("queues: {ads: {share: jobs, queues: {prod: {share: users}}}}", True),   # overridden
])
def test_the_share_key_defaults_to_users_and_is_inherited(text: str, shares_users: bool) -> None:
    queues = parse_queue_text(text, "q.yaml")
    assert queues.shares_users(queues.leaves[0]) is shares_users


@pytest.mark.parametrize("value", ["people", "1", "[users]", "true"])
def test_a_bad_share_is_refused_naming_the_key(value: str) -> None:
    with pytest.raises(YamlConfigError, match=r"q.yaml:1: queues.lab.share: .* use users .* or jobs"):
        parse_queue_text(f"queues: {{lab: {{share: {value}}}}}", "q.yaml")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("share, alice, bob", [("users", 4, 4), ("jobs", 7, 1)])
def test_eight_one_task_jobs_against_one_eight_task_job(policy: str, share: str, alice: int, bob: int) -> None:
    placed = picks(policy, split_views(), Resources(8, 8 * 10**9), tree(share))
    assert by_user(placed) == (alice, bob)


@pytest.mark.parametrize("policy", POLICIES)
def test_what_a_users_finished_placements_hold_counts_for_it(policy: str) -> None:
    """Alice's 4 jobs already running have nothing left to place: they are not among the
    views, yet they count for her through `held`, so bob gets the 4 free slots."""
    views = split_views()[:1] + split_views()[5:]   # bob's 8 tasks, alice's last 4 jobs
    held = {("lab", "alice"): Resources(4, 4 * 10**9)}
    placed = picks(policy, views, Resources(8, 8 * 10**9), tree(), held)
    assert by_user(placed) == (0, 4)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_users_own_jobs_take_turns_by_their_shares_and_weights(policy: str) -> None:
    one = Resources(1)
    views = [JobView("a-heavy", "lab", 0.0, one, 10, 0, 3.0, "alice"), JobView("a-light", "lab", 1.0, one, 10, 0, 1.0, "alice"),
             JobView("bob", "lab", 2.0, one, 10, 0, 1.0, "bob")]
    placed = picks(policy, views, Resources(8), tree())
    assert placed == {"a-heavy": 3, "a-light": 1, "bob": 4}


@pytest.mark.parametrize("policy, carol, alice, bob", [("hdrf", 4, 2, 2), ("mch", 4, 2, 2), ("drf", 3, 3, 2)])
def test_users_share_within_their_leaf_and_leaves_between_them(policy: str, carol: int, alice: int, bob: int) -> None:
    """The tree's policies split the queues first; flat DRF has no queues, only users."""
    one = Resources(1)
    views = [JobView("o", "other", 0.0, one, 10, 0, 1.0, "carol")]
    views += [JobView(f"a{i}", "lab", 1.0, one, 1, 0, 1.0, "alice") for i in range(6)]
    views += [JobView("bob", "lab", 2.0, one, 6, 0, 1.0, "bob")]
    placed = picks(policy, views, Resources(8), tree())
    assert (placed["o"], *by_user(placed)) == (carol, alice, bob)


def test_the_held_index_counts_tasks_and_forgets_a_user_at_zero() -> None:
    index = HeldIndex()
    task = Resources(0.1, 10**8)
    for _ in range(3):
        index.add("lab", "alice", task)
    for _ in range(2):
        index.remove("lab", "alice", task)
    assert index.view()[("lab", "alice")].get("cpu") == pytest.approx(0.1) and index.tasks(("lab", "alice")) == 1
    index.remove("lab", "alice", task)
    assert ("lab", "alice") not in index.view()
    assert held_of([("lab", "alice", task, 2), ("lab", "", task, 5), ("lab", "bob", task, 0)]) == \
        {("lab", "alice"): task.times(2)}


# reserve_after_s: out of reach. A reservation is per job (a job whose next task waited 30 s
# holds a node), so many one-task jobs and one job hold at different moments; Hypothesis
# found a run where a split job's hold left a core idle at t=30. Here only fairness differs.
SPLIT_SCENARIO = """
reserve_after_s: 1000000
nodes: [{{count: {nodes}, name_prefix: n, capacity: {{cpu: 4, memory: 16Gi}}}}]
queues: {{lab: {{share: {share}}}}}
jobs:
{jobs}
"""


def split_scenario(share: str, nodes: int, alice_jobs: int, bob_tasks: int, durations: tuple[int, int] = (1000, 1000),
                   whole: bool = False) -> str:
    """Bob's one job of `bob_tasks`; alice's `alice_jobs` tasks as one-task jobs, or one job if `whole`."""
    alice_time, bob_time = durations
    jobs = [f"  - {{name: bob, user: bob, queue: lab, tasks: {bob_tasks}, resources: {{cpu: 1}}, duration: {bob_time}}}"]
    if whole:
        jobs.append(f"  - {{name: a, user: alice, queue: lab, tasks: {alice_jobs}, resources: {{cpu: 1}}, "
                    f"duration: {alice_time}}}")
    else:
        jobs += [f"  - {{name: a{i}, user: alice, queue: lab, resources: {{cpu: 1}}, duration: {alice_time}}}"
                 for i in range(alice_jobs)]
    return SPLIT_SCENARIO.format(nodes=nodes, share=share, jobs="\n".join(jobs))


def by_user_at(text: str, policy: str, until: float) -> tuple[tuple[int, int], tuple[int, int]]:
    """((alice running, alice done), (bob running, bob done)) at `until`."""
    run = simulate(parse_scenario(text, "split.yaml"), policy, "first-fit", until=until)
    alice = [(len(t.running), t.done) for t in run.tracks if t.spec.name != "bob"]
    bob = next((len(t.running), t.done) for t in run.tracks if t.spec.name == "bob")
    return (sum(r for r, _ in alice), sum(d for _, d in alice)), bob


@settings(max_examples=25, deadline=None)
@given(policy=st.sampled_from(POLICIES), nodes=st.integers(1, 3), alice_jobs=st.integers(1, 30),
       bob_tasks=st.integers(1, 30), durations=st.tuples(st.integers(1, 9), st.integers(1, 9)),
       until=st.integers(0, 40))
def test_splitting_work_into_many_jobs_gains_a_user_nothing(policy: str, nodes: int, alice_jobs: int, bob_tasks: int,
                                                            durations: tuple[int, int], until: int) -> None:
    """Alice's tasks as many one-task jobs or as one job: at any time of the run she has
    as many running and done either way (freed slots go to the user below her share,
    her jobs with nothing left to place counted)."""
    split = by_user_at(split_scenario("users", nodes, alice_jobs, bob_tasks, durations), policy, until)
    whole = by_user_at(split_scenario("users", nodes, alice_jobs, bob_tasks, durations, whole=True), policy, until)
    assert split == whole


@pytest.mark.parametrize("policy", POLICIES)
def test_at_the_start_the_slots_split_evenly_between_the_users(policy: str) -> None:
    (alice, _), (bob, _) = by_user_at(split_scenario("users", 2, 40, 40), policy, 0)
    assert (alice, bob) == (4, 4)


def test_the_same_split_by_jobs_lets_the_many_jobs_win() -> None:
    """With `share: jobs` (today's order) splitting pays: the property above can fail."""
    (alice, _), (bob, _) = by_user_at(split_scenario("jobs", 2, 40, 40), "mch", 0)
    assert alice >= 7 and bob <= 1


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fair-users.yaml"


def share_error(share: str, decay: bool) -> float:
    text = EXAMPLE.read_text().replace("share: users}", f"share: {share}}}")
    if decay:
        text = text.replace("# usage_half_life", "usage_half_life")
    scenario = parse_scenario(text, "fair-users.yaml")
    return float(user_shares(simulate(scenario, "mch", "first-fit", until=400))["user_share_error"])


def test_the_examples_share_error_with_and_without_the_user_level_and_decay() -> None:
    """README's comparison (examples/fair-users.yaml): many jobs take everything by jobs;
    by users the error is alice's head start only, and decay shrinks it."""
    by_jobs, by_users, decayed = share_error("jobs", False), share_error("users", False), share_error("users", True)
    assert by_jobs == pytest.approx(0.5) and by_users == pytest.approx(0.125) and decayed < by_users
