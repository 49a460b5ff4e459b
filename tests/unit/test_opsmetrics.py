"""The operator's series (master/usage/opsmetrics.py): outcome counters count each end once
(a requeued job's next end again; a job found finished at start, or written again, never),
and the build, leader and process series are there."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tcluster.domain.model import Job, JobSpec, JobState, Task, TaskState
from tcluster.master.core.events import Now, Step
from tcluster.master.core.feed import AppliedStep
from tcluster.master.usage.opsmetrics import Outcomes, ops_registry
from tcluster.domain.resources import Resources

SPEC = JobSpec(command=("true",), resources=Resources.of({"cpu": 1, "memory": 2**20}), name="j")


def _job(job_id: str, state: JobState) -> Job:
    return Job(job_id, SPEC, 1.0, state=state)


def _apply(outcomes: Outcomes, jobs: list[Job] = [], tasks: list[Task] = [],
           before: dict[str, Task | None] | None = None, gone: set[str] = set()) -> None:
    step = Step(jobs={j.id: j for j in jobs}, tasks={t.id: t for t in tasks}, jobs_del=set(gone))
    outcomes.on_step(AppliedStep(object(), step, Now(1.0, 1.0), before=before or {}))  # type: ignore[arg-type]


def test_each_job_end_counts_once_and_a_requeued_job_counts_again() -> None:
    outcomes = Outcomes()
    outcomes.seed(SimpleNamespace(jobs={"old": _job("old", JobState.SUCCEEDED)}))
    _apply(outcomes, [_job("old", JobState.SUCCEEDED)])              # found finished at start: not counted
    _apply(outcomes, [_job("a", JobState.RUNNING)])
    _apply(outcomes, [_job("a", JobState.FAILED)])
    _apply(outcomes, [_job("a", JobState.FAILED)])                   # written again (an update): once
    assert outcomes.jobs == {"FAILED": 1}
    _apply(outcomes, [_job("a", JobState.PENDING)])                  # requeued
    _apply(outcomes, [_job("a", JobState.SUCCEEDED)])
    assert outcomes.jobs == {"FAILED": 1, "SUCCEEDED": 1}
    _apply(outcomes, gone={"a", "old"})
    assert outcomes._ended_jobs == set()                             # forgotten jobs are not kept


def test_task_ends_count_the_transition_into_a_final_state() -> None:
    outcomes = Outcomes()
    running = Task("a", 0, TaskState.RUNNING, node="n1", attempt=1)
    failed = Task("a", 0, TaskState.FAILED, node="n1", attempt=1)
    _apply(outcomes, tasks=[running], before={running.id: None})
    _apply(outcomes, tasks=[failed], before={running.id: running})
    _apply(outcomes, tasks=[failed], before={running.id: failed})     # already final: not again
    lost = Task("b", 0, TaskState.LOST, node="n1", attempt=1)
    _apply(outcomes, tasks=[lost], before={lost.id: None})           # born final (a recovered row)
    assert outcomes.tasks == {"FAILED": 1, "LOST": 1}


def test_the_registry_has_build_leader_process_and_every_final_state() -> None:
    outcomes = Outcomes()
    outcomes.jobs["CANCELLED"] = 2
    text = generate_latest(ops_registry(SimpleNamespace(state=object()), outcomes, commit="abc123")).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["tcluster_build_info"].samples[0].labels["commit"] == "abc123"
    assert families["tcluster_master_leader"].samples[0].value == 1
    jobs = {s.labels["state"]: s.value for s in families["tcluster_jobs_finished"].samples if s.name.endswith("_total")}
    assert jobs == {"SUCCEEDED": 0, "FAILED": 0, "CANCELLED": 2}
    tasks = {s.labels["state"] for s in families["tcluster_tasks_finished"].samples}
    assert tasks == {"SUCCEEDED", "FAILED", "KILLED", "LOST"}
    assert "process_cpu_seconds" in families and "python_info" in families
    standby = generate_latest(ops_registry(SimpleNamespace(state=None), Outcomes(), commit="x")).decode()
    assert "tcluster_master_leader 0.0" in standby
