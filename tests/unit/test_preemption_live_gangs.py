"""The live master's preemption input for gangs (master/features/preempting.py): each gang
job's running members on their nodes, without those being stopped (a kill intent, on disk:
after a restart the planner sees the same thing), and a plan that takes one member takes
the whole gang, whose members become one Preempt event."""

from __future__ import annotations

from tcluster.domain.model import Job, JobSpec, Node, Task, TaskState
from tcluster.domain.resources import Resources
from tcluster.master.core.events import KillIntent, KillMode
from tcluster.master.core.state import MasterState, Timeouts
from tcluster.master.features.preempting import LivePreemption
from tcluster.scheduler.matching import EligibleCache
from tcluster.scheduler.preemption import PreemptionSettings
from tcluster.scheduler.queues import parse_queue_text
from tcluster.scheduler.reservations import Reservations

NOW = 10_000.0
TIMEOUTS = Timeouts(node_timeout_s=1e9, lost_timeout_s=1e9, start_timeout_s=1e9, job_retention_s=1e9,
                    purge_interval_s=1e9)
ONE = Resources(1, 1 << 30)
TREE = parse_queue_text("queues:\n  a: {weight: 1}\n  b: {weight: 1}\n", "t")


def state(kills: tuple[KillIntent, ...] = ()) -> MasterState:
    """Two 2-core nodes; a runs two 2-task gangs (one member of each per node); b waits."""
    jobs = [Job(g, JobSpec(("sleep", "inf"), ONE, queue="a", tasks=2, gang=True), 0.0) for g in ("g1", "g2")]
    jobs.append(Job("bj", JobSpec(("sleep", "inf"), ONE, queue="b", tasks=1), NOW - 3600))
    tasks = [Task(g, i, TaskState.RUNNING, f"n{i + 1}", 1, started_at=NOW - 600) for g in ("g1", "g2") for i in (0, 1)]
    tasks.append(Task("bj", 0))
    s = MasterState(jobs, tasks, [Node(n, Resources(2, 4 << 30)) for n in ("n1", "n2")], list(kills), TIMEOUTS,
                    started_mono=0.0)
    for n in ("n1", "n2"):
        s.matrix.set_schedulable(n, True)
    return s


def test_the_input_lists_each_gangs_running_members_on_their_nodes() -> None:
    live = LivePreemption(PreemptionSettings())
    inp = live._input(state(), TREE, Reservations(), EligibleCache(), NOW)
    assert {job: sorted((m.node, m.task.task_id) for m in members) for job, members in inp.gangs.items()} == {
        "g1": [("n1", "g1.0"), ("n2", "g1.1")], "g2": [("n1", "g2.0"), ("n2", "g2.1")]}


def test_members_being_stopped_are_left_out() -> None:
    kill = KillIntent("g1.0", 1, "n1", "Preempted by job bj", KillMode.REQUEUE, "bj")
    inp = LivePreemption(PreemptionSettings())._input(state((kill,)), TREE, Reservations(), EligibleCache(), NOW)
    assert sorted(m.task.task_id for m in inp.gangs["g1"]) == ["g1.1"]


def test_a_plan_takes_a_whole_gang_into_one_preempt_event() -> None:
    s = state()
    live = LivePreemption(PreemptionSettings())
    live.starved_since = {"b": NOW - 3600}
    plan = live.plan(s, TREE, Reservations(), EligibleCache(), NOW)
    event = live.event(plan, s, NOW)
    assert event is not None
    victims = sorted(task for task, *_ in event.victims)
    assert victims in (["g1.0", "g1.1"], ["g2.0", "g2.1"])
