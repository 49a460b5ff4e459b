"""The master's transitions as tables: an event on a given state -> the rows written,
the actions sent and the state after. Pure: handle() never changes the state; only
apply() does, after the (here imaginary) write."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tcluster.domain.errors import InvalidArgument
from tcluster.master.core.actions import Registration, TaskReport
from tcluster.master.core.events import (
    Ack, AgentJoined, AgentLeft, Beat, Cancel, Disconnect, Kill, Launch, Now, Place, Reports, Step, Submit, Tick,
    Welcome,
)
from tcluster.master.core.state import MasterState, Timeouts
from tcluster.master.core.transitions import handle
from tcluster.domain.model import Job, JobSpec, JobState, Node, NodeState, Task, TaskState
from tcluster.domain.resources import Resources
from tcluster.master.core.usageblock import EMPTY, UsageBlock

J = "0123abcd"
T = f"{J}.0"
TIMEOUTS = Timeouts(node_timeout_s=10, lost_timeout_s=20, start_timeout_s=30, job_retention_s=100,
                    heartbeat_interval_s=1)


class World:
    """A MasterState driven by events at chosen times; every step is checked to be pure."""

    def __init__(self, jobs: list[Job] = (), tasks: list[Task] = (), nodes: list[Node] = ()) -> None:  # type: ignore[assignment]
        self.state = MasterState(list(jobs), list(tasks), list(nodes), [], TIMEOUTS, started_mono=0.0)
        self.mono = 0.0

    def do(self, event: object, at: float | None = None) -> Step:
        if at is not None:
            self.mono = at
        before = (dict(self.state.jobs), {k: list(v) for k, v in self.state.tasks.items()}, dict(self.state.kills))
        step = handle(self.state, event, Now(1000.0 + self.mono, self.mono))  # type: ignore[arg-type]
        assert before == (self.state.jobs, self.state.tasks, self.state.kills), "handle() must not change the state"
        self.state.apply(step)
        return step

    def join(self, node: str, running: tuple[tuple[str, int], ...] = (), reports: tuple[TaskReport, ...] = (),
             at: float | None = None) -> Step:
        reg = Registration(node, Resources(4, 2**33), Resources(), (), "fake", running, reports,
                           len(reports))
        return self.do(AgentJoined(reg), at)

    def task(self) -> Task:
        task = self.state.task(T)
        assert task is not None
        return task

    def job(self) -> Job:
        return self.state.jobs[J]


def spec(retries: int = 0, cpu: float = 1) -> JobSpec:
    return JobSpec(("sleep", "9"), Resources(cpu, 2**20), retries=retries)


def running_world(retries: int = 0, state: TaskState = TaskState.RUNNING) -> World:
    w = World()
    w.join("n1")
    w.join("n2")
    w.do(Submit(J, spec(retries)))
    w.do(Place(((T, "n1"),)))
    if state is TaskState.RUNNING:
        w.do(Reports("n1", (TaskReport(T, 1, TaskState.RUNNING, at=1.0),), 1))
    assert w.task().state is state
    return w


def ended(state: TaskState, attempt: int = 1, code: int | None = 0) -> TaskReport:
    return TaskReport(T, attempt, state, exit_code=code, at=5.0)


def test_submit_writes_the_job_and_its_tasks() -> None:
    w = World()
    w.join("n1")
    step = w.do(Submit(J, spec()))
    assert set(step.jobs) == {J} and set(step.tasks) == {T}
    assert w.job().state is JobState.PENDING and J in w.state.pending_jobs


def test_a_request_that_fits_no_node_is_refused_and_nothing_is_written() -> None:
    w = World()
    w.join("n1")
    with pytest.raises(InvalidArgument):
        w.do(Submit(J, spec(cpu=64)))
    assert J not in w.state.jobs


def test_place_starts_an_attempt_and_sends_the_launch() -> None:
    w = running_world(state=TaskState.STARTING)
    assert (w.task().node, w.task().attempt, w.job().state) == ("n1", 1, JobState.RUNNING)


@pytest.mark.parametrize("report,state,reason", [
    (ended(TaskState.SUCCEEDED), TaskState.SUCCEEDED, ""),
    (ended(TaskState.FAILED, code=3), TaskState.FAILED, ""),
    (replace(ended(TaskState.FAILED), rejected=True, reason="full"), TaskState.PENDING, "refused"),
])
def test_reports_end_or_requeue_the_attempt(report: TaskReport, state: TaskState, reason: str) -> None:
    w = running_world(state=TaskState.STARTING)
    step = w.do(Reports("n1", (report,), 7))
    assert w.task().state is state and reason in w.task().reason
    assert Ack("n1", 7) in step.actions


def test_stale_and_repeated_reports_change_nothing() -> None:
    """Exactly once: only the node and attempt that run the task can end it, once."""
    w = running_world()
    assert not w.do(Reports("n2", (ended(TaskState.FAILED),), 1)).tasks          # another node
    assert not w.do(Reports("n1", (ended(TaskState.FAILED, attempt=7),), 2)).tasks   # another attempt
    w.do(Reports("n1", (ended(TaskState.SUCCEEDED),), 3))
    assert not w.do(Reports("n1", (ended(TaskState.FAILED, code=1),), 4)).tasks   # after the end
    assert w.task().state is TaskState.SUCCEEDED and w.job().state is JobState.SUCCEEDED


def test_retries_rerun_failures_then_the_task_ends() -> None:
    w = running_world(retries=1)
    w.do(Reports("n1", (ended(TaskState.FAILED, code=3),), 2))
    assert (w.task().state, w.task().failures) == (TaskState.PENDING, 1) and "retry 1 of 1" in w.task().reason
    w.do(Place(((T, "n2"),)))
    w.do(Reports("n2", (ended(TaskState.FAILED, attempt=2, code=3),), 1))
    assert (w.task().state, w.task().failures, w.task().attempt) == (TaskState.FAILED, 2, 2)
    assert w.job().state is JobState.FAILED


def test_cancel_kills_pending_at_once_and_running_by_intent() -> None:
    w = running_world()
    step = w.do(Cancel(J))
    assert w.job().state is JobState.CANCELLED and w.task().state is TaskState.RUNNING
    assert Kill("n1", T, 1, "cancelled") in step.actions and (T, 1) in step.kills_put
    w.do(Reports("n1", (ended(TaskState.KILLED, code=None),), 2))
    assert w.task().state is TaskState.KILLED and not w.state.kills and w.job().finished_at


def test_cancel_while_the_node_is_away_is_resent_when_it_registers() -> None:
    w = running_world()
    w.do(AgentLeft("n1"), at=1)
    step = w.do(Cancel(J), at=2)
    assert not [a for a in step.actions if isinstance(a, Kill)] and (T, 1) in w.state.kills
    step = w.join("n1", running=((T, 1),), at=3)
    welcome = next(a for a in step.actions if isinstance(a, Welcome))
    assert [(k.task_id, k.attempt, k.reason) for k in welcome.kills] == [(T, 1, "cancelled")]
    assert welcome.fence_after_s == TIMEOUTS.node_timeout_s + TIMEOUTS.lost_timeout_s / 2


@pytest.mark.parametrize("running,kills", [
    (((T, 1),), []),                                     # the one it should run: kept
    (((T, 1), ("0123abcd.5", 1)), [("0123abcd.5", 1)]),    # unknown to the master
    (((T, 2),), [(T, 2)]),                               # an attempt that is not the current one
])
def test_registration_kills_what_the_master_does_not_want(running: tuple, kills: list) -> None:  # type: ignore[type-arg]
    w = running_world()
    w.do(AgentLeft("n1"), at=1)
    step = w.join("n1", running=running, at=2)
    welcome = next(a for a in step.actions if isinstance(a, Welcome))
    assert [(k.task_id, k.attempt) for k in welcome.kills] == kills


@pytest.mark.parametrize("before,retries,after,failures", [
    (TaskState.STARTING, 0, TaskState.PENDING, 0),     # never reached the agent: runs again, no failure
    (TaskState.RUNNING, 0, TaskState.LOST, 1),
    (TaskState.RUNNING, 1, TaskState.PENDING, 1),
])
def test_registration_without_a_task_the_master_placed(before: TaskState, retries: int, after: TaskState,
                                                        failures: int) -> None:
    w = running_world(retries=retries, state=before)
    w.do(AgentLeft("n1"), at=1)
    w.join("n1", running=(), at=2)
    assert (w.task().state, w.task().failures) == (after, failures)


def test_a_silent_node_goes_down_then_its_tasks_are_lost_then_retried() -> None:
    w = running_world(retries=1)
    w.do(Beat("n2", Resources(4, 2**33), EMPTY), at=9)
    step = w.do(Tick(), at=10.5)
    assert Disconnect("n1", "silent for 10s") in step.actions and w.state.nodes["n1"].state is NodeState.DOWN
    assert w.task().state is TaskState.RUNNING
    w.do(Tick(), at=29)                    # node + lost timeout not yet over (30 s)
    assert w.task().state is TaskState.RUNNING
    w.do(Tick(), at=31)
    assert (w.task().state, w.task().failures) == (TaskState.PENDING, 1) and "unreachable" in w.task().reason
    assert not w.state.matrix.view().schedulable.any() or "n1" not in w.state.by_node


def test_nodes_loaded_at_start_are_down_and_their_clock_starts_then() -> None:
    job = Job(J, spec(), 1.0, JobState.RUNNING)
    task = Task(J, 0, TaskState.RUNNING, "n1", 1)
    node = Node("n1", Resources(4, 2**33), state=NodeState.READY)
    w = World([job], [task], [node])
    assert w.state.nodes["n1"].state is NodeState.DOWN and not w.state.matrix.view().schedulable.any()
    w.do(Tick(), at=29)
    assert w.task().state is TaskState.RUNNING
    w.do(Tick(), at=31)
    assert w.task().state is TaskState.LOST and w.job().state is JobState.FAILED


def test_a_launch_that_never_starts_is_stopped_then_counted_lost() -> None:
    w = running_world(retries=1, state=TaskState.STARTING)
    w.do(Beat("n1", Resources(4, 2**33), EMPTY), at=30)
    step = w.do(Tick(), at=31)
    assert Kill("n1", T, 1, "did not start within 30s on node n1") in step.actions
    assert w.task().state is TaskState.STARTING                 # until the node confirms it is gone
    w.do(Reports("n1", (ended(TaskState.KILLED, code=None),), 1), at=32)
    assert (w.task().state, w.task().failures) == (TaskState.PENDING, 1)


def test_finished_jobs_are_forgotten_after_the_retention() -> None:
    w = running_world()
    w.do(Reports("n1", (ended(TaskState.SUCCEEDED),), 2), at=1)
    finished = w.job().finished_at
    step = w.do(Tick(), at=finished - 1000 + 50)          # a purge, but the job is younger than 100 s
    assert step.purge_before == pytest.approx(finished - 50) and J in w.state.jobs
    assert not w.do(Tick(), at=finished - 1000 + 101).purge_before     # once per purge interval
    step = w.do(Tick(), at=finished - 1000 + 111)
    assert step.purge_before > finished and J not in w.state.jobs


def test_only_the_newest_finished_jobs_stay_in_memory() -> None:
    """Memory follows what can change, not history: older finished jobs are read from disk."""
    w = World()
    w.join("n1")
    w.state.timeouts = replace(TIMEOUTS, resident_finished_jobs=2)
    ids = [f"0000000{i}" for i in range(4)]
    for i, job_id in enumerate(ids):
        w.do(Submit(job_id, spec()), at=i)
        w.do(Cancel(job_id), at=i + 0.5)
    assert [j for j in ids if j in w.state.jobs] == ids[2:]


def test_request_ids_are_indexed_while_their_jobs_are_in_memory() -> None:
    """The index a retried Submit is matched by: filled by submits and by a load, per owner,
    emptied as jobs leave memory (it never names a job memory does not hold)."""
    w = World()
    w.join("n1")
    w.state.timeouts = replace(TIMEOUTS, resident_finished_jobs=1)
    keyed = lambda owner, key: replace(spec(), owner=owner, request_id=key)   # noqa: E731
    w.do(Submit("0000000a", keyed("alice", "r1")), at=1)
    w.do(Submit("0000000b", keyed("bob", "r1")), at=2)
    w.do(Submit("0000000c", spec()), at=3)
    assert w.state.by_request == {("alice", "r1"): "0000000a", ("bob", "r1"): "0000000b"}
    loaded = MasterState(list(w.state.jobs.values()), [], [], [], TIMEOUTS, started_mono=0.0)
    assert loaded.by_request == w.state.by_request
    w.do(Cancel("0000000a"), at=4)
    w.do(Cancel("0000000b"), at=5)     # only the newest finished job stays: a's goes
    assert w.state.by_request == {("bob", "r1"): "0000000b"}
    assert all(job_id in w.state.jobs for job_id in w.state.by_request.values())


def test_heartbeats_write_nothing_and_keep_usage_in_memory() -> None:
    from tcluster.domain.model import TaskUsage
    w = running_world()
    step = w.do(Beat("n1", Resources(3, 2**33), UsageBlock.of({T: (1, TaskUsage(cpu_seconds=2.0)),
                                                             "0123abcd.9": (1, TaskUsage())})))
    assert not step.durable and Ack("n1", 0) in step.actions
    assert w.state.task_view(w.task()).usage.cpu_seconds == 2.0


def test_launch_action_carries_the_whole_spec() -> None:
    w = World()
    w.join("n1")
    w.do(Submit(J, JobSpec(("x",), Resources(1, 1), pids_max=77, cpu_limit=0.5)))
    step = w.do(Place(((T, "n1"),)))
    launch = next(a for a in step.actions if isinstance(a, Launch))
    assert (launch.spec.pids_max, launch.spec.cpu_limit, launch.attempt) == (77, 0.5, 1)


def test_finished_jobs_in_memory_are_bounded_by_their_tasks_too() -> None:
    w = World()
    w.join("n1")
    w.state.timeouts = replace(TIMEOUTS, resident_finished_jobs=100, resident_finished_tasks=5)
    ids = [f"0000001{i}" for i in range(3)]
    for i, job_id in enumerate(ids):
        w.do(Submit(job_id, replace(spec(), tasks=3)), at=i)
        w.do(Cancel(job_id), at=i + 0.5)
    assert [j for j in ids if j in w.state.jobs] == ids[2:] and w.state.finished_tasks == 3


def test_a_join_looks_only_at_its_own_nodes_kill_intents() -> None:
    w = running_world()
    w.do(Cancel(J))
    intent = w.state.kills.get((T, 1))
    assert intent is not None and intent.node == "n1"
    w.join("n2")   # another node: the intent on n1 stays, and the index says where it is
    assert w.state.kills_on("n1") == [((T, 1), intent)] and w.state.kills_on("n2") == []
    w.join("n1")   # n1 no longer runs the task: its intent is settled and leaves the index
    assert w.state.kills.get((T, 1)) is None and w.state.kills_on("n1") == []


def test_the_tick_finds_silent_nodes_from_the_oldest_and_stops_at_a_recent_one() -> None:
    w = World()
    for name in ("a", "b", "c"):
        w.join(name, at=0.0)
    w.do(Beat("c", Resources(), EMPTY), at=5.0)
    w.do(AgentLeft("a"), at=6.0)          # gone: keeps its last_seen, stays oldest
    w.do(Beat("b", Resources(), EMPTY), at=8.0)
    assert list(w.state.live) == ["a", "c", "b"]   # ordered by last_seen
    assert not w.do(Tick(), at=12.0).actions        # a waits for the lost timeout; c, b are recent
    step = w.do(Tick(), at=16.0)                     # c silent 11 s: down; b (8 s) is not
    assert [a.node for a in step.actions if isinstance(a, Disconnect)] == ["c"]
    assert not w.state.connected("c") and w.state.connected("b")


# ---- issue 26: stream-liveness agents ----

def stream_join(w: World, node: str, at: float | None = None, interval: float = 0.0) -> Step:
    from tcluster.wire.features import AGENT_FEATURES
    reg = Registration(node, Resources(4, 2**33), Resources(), (), "fake", (), (), 0,
                       features=frozenset(AGENT_FEATURES), usage_interval_s=interval)
    return w.do(AgentJoined(reg), at)


def test_a_stream_liveness_agent_is_told_its_usage_interval_from_the_cluster_size() -> None:
    w = World()
    for i in range(3):
        w.join(f"old{i}")
    welcome = next(a for a in stream_join(w, "n1").actions if isinstance(a, Welcome))
    assert (welcome.cluster_nodes, welcome.usage_interval_s) == (4, 1.0)     # 4 nodes / 250 a second: the floor
    old = next(a for a in w.join("n2").actions if isinstance(a, Welcome))
    assert old.usage_interval_s == 0.0              # an older agent keeps heartbeating
    own = next(a for a in stream_join(w, "n3", interval=7.5).actions if isinstance(a, Welcome))
    assert own.usage_interval_s == 7.5              # the operator's --usage-interval-s wins
    assert w.state.live["n3"].report_limit_s == 10 + 2 * 7.5 and w.state.live["n2"].report_limit_s == 0


def test_a_connected_stream_node_stays_up_without_reports_until_two_are_missed() -> None:
    w = World()
    w.join("n1", at=0)
    stream_join(w, "n2", at=0, interval=30)        # limit: 10 + 60 s
    step = w.do(Tick(), at=11)
    assert Disconnect("n1", "silent for 11s") in step.actions               # an older agent: node timeout
    assert not any(isinstance(a, Disconnect) and a.node == "n2" for a in step.actions)
    assert w.state.nodes["n2"].state is NodeState.READY
    w.do(Beat("n2", Resources(4, 2**33), EMPTY), at=50)    # a report restarts its clock
    assert not any(isinstance(a, Disconnect) for a in w.do(Tick(), at=119).actions)
    step = w.do(Tick(), at=121)                  # hung: its stream is up but no report for 71 s
    assert Disconnect("n2", "silent for 71s") in step.actions and w.state.nodes["n2"].state is NodeState.DOWN


def test_a_dead_stream_node_is_down_at_once_and_its_tasks_lost_within_the_timeouts() -> None:
    w = World()
    stream_join(w, "n1", at=0, interval=30)
    w.do(Submit(J, spec(retries=1)), at=1)
    w.do(Place(((T, "n1"),)), at=1)
    w.do(Reports("n1", (TaskReport(T, 1, TaskState.RUNNING, at=1.0),), 1), at=2)
    w.do(AgentLeft("n1"), at=50)                 # the stream broke (its process died): 48 s without a report
    assert w.state.nodes["n1"].state is NodeState.DOWN
    w.do(Tick(), at=79)                          # node + lost timeout (30 s) counts from the stream's end
    assert w.task().state is TaskState.RUNNING
    w.do(Tick(), at=80.5)
    assert (w.task().state, w.task().failures) == (TaskState.PENDING, 1) and "unreachable" in w.task().reason


def test_a_growing_cluster_lengthens_the_usage_interval_on_the_next_report_ack() -> None:
    from dataclasses import replace as _replace
    w = World()
    w.state.timeouts = _replace(TIMEOUTS, report_budget_per_s=2.0)     # 2 reports a second, cluster-wide
    stream_join(w, "n1", at=0)
    assert w.state.live["n1"].usage_interval_s == 1.0                   # 1 node: the floor
    for i in range(7):
        w.join(f"old{i}", at=0)
    step = w.do(Beat("n1", Resources(4, 2**33), EMPTY), at=1)
    assert Ack("n1", 0, 4.0) in step.actions                            # 8 nodes / 2 a second
    assert (w.state.live["n1"].usage_interval_s, w.state.live["n1"].report_limit_s) == (4.0, 18.0)
    step = w.do(Beat("n1", Resources(4, 2**33), EMPTY), at=2)
    assert Ack("n1", 0) in step.actions                                 # unchanged: not said again
    w.state.timeouts = _replace(TIMEOUTS, report_budget_per_s=100.0)   # a reload: the interval would shrink
    assert Ack("n1", 0) in w.do(Beat("n1", Resources(4, 2**33), EMPTY), at=2.5).actions   # not shortened live:
    assert w.state.live["n1"].usage_interval_s == 4.0      # an agent cut off before hearing it would fence late
    w.state.timeouts = _replace(TIMEOUTS, report_budget_per_s=2.0)
    stream_join(w, "n2", at=2, interval=3.0)
    w.join("old7", at=2)
    w.join("old8", at=2)
    assert Ack("n2", 0) in w.do(Beat("n2", Resources(4, 2**33), EMPTY), at=3).actions   # the operator's stays
