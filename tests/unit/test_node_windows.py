"""Maintenance windows in a scheduling round (scheduler/windows.py): a job starts only
where it cannot still run when the window opens; without a time limit it starts nowhere
whose window is not over (JobSpec.time_limit_s, `tcl submit --time-limit`). The pending
reason names the window."""

from __future__ import annotations

import random
from tcluster.domain.model import Job, JobSpec, Task
from tcluster.domain.nodeorders import NodeOps
from tcluster.domain.resources import Resources
from tcluster.scheduler.fairness import FifoPolicy
from tcluster.scheduler.nodestate import NodeMatrix
from tcluster.scheduler.placement import FirstFit
from tcluster.scheduler.round import schedule_round
from tcluster.scheduler.windows import Windows, time_limit_of, windows_of

NOW = 1_000_000.0
WINDOW = NodeOps(maint_start=NOW + 3600, maint_end=NOW + 7200, maint_by="ops", maint_reason="ups")


def matrix() -> NodeMatrix:
    m = NodeMatrix()
    m.upsert("n1", Resources(4, 2**33), {})
    m.upsert("n2", Resources(1, 2**33), {})
    return m


def place(spec: JobSpec, nodes: NodeMatrix, windows: Windows | None) -> tuple[list[str], dict[str, str]]:
    jobs = {"j": Job("j", spec, 1.0)}
    result = schedule_round(jobs, {"j": [Task("j", 0)]}, nodes, FifoPolicy(), FirstFit(), random.Random(0),
                            now=NOW, windows=windows)
    return [node for _, node in result.placements], result.pending_reasons


def test_without_a_time_limit_a_future_window_keeps_the_job_off() -> None:
    spec = JobSpec(("true",), Resources(1, 2**20))
    assert time_limit_of(spec) == 0
    assert place(spec, matrix(), windows_of({"n1": WINDOW}, NOW))[0] == ["n2"]
    assert place(spec, matrix(), None)[0] == ["n1"]


def test_a_time_limit_that_ends_before_the_window_may_start_there() -> None:
    assert place(JobSpec(("true",), Resources(1, 2**20), time_limit_s=3600), matrix(),
                 windows_of({"n1": WINDOW}, NOW))[0] == ["n1"]
    assert place(JobSpec(("true",), Resources(1, 2**20), time_limit_s=3601), matrix(),
                 windows_of({"n1": WINDOW}, NOW))[0] == ["n2"]


def test_the_pending_reason_names_the_window() -> None:
    spec = JobSpec(("true",), Resources(2, 2**20))       # n2 is too small; n1 has the window
    placed, reasons = place(spec, matrix(), windows_of({"n1": WINDOW}, NOW))
    assert placed == []
    assert reasons["j"] == ("no node has enough cpu right now: each task needs 2, the most free is 1 on n2; node n1 has "
                            "a maintenance window from 1970-01-12 14:46 to 1970-01-12 15:46 UTC and the job has no "
                            "time limit")
    nodes = matrix()
    nodes.set_schedulable("n2", False)                   # only the window keeps it waiting
    assert place(spec, nodes, windows_of({"n1": WINDOW}, NOW))[1]["j"].startswith("node n1 has a maintenance window")


def test_windows_that_are_over_cost_nothing() -> None:
    assert windows_of({"n1": WINDOW}, NOW + 7200) is None
    assert windows_of({"n1": NodeOps()}, NOW) is None
