"""One clock for time limits (issue 36 #7): an agent whose wall clock is 5 minutes behind
the master's reported its task's start on its own clock, and the master compared that with
its own: the task was killed for its --time-limit at once (or, with a clock ahead, ran 5
minutes too long). The master now reads the agent's times on its own clock (the offset
from the agent's send times; master/edge/agent_clock.py)."""

from __future__ import annotations

import asyncio
import time
import types
from pathlib import Path

import pytest

from tcluster.domain.reports import TaskReport
from tcluster.domain.model import TaskState
from tcluster.master.edge.agent_clock import AgentClock
from tcluster.v1 import common_pb2, jobs_pb2
from tests.component.harness import Harness, run

SKEW_S = -300.0


def _skewed_time() -> types.SimpleNamespace:
    names = {name: getattr(time, name) for name in dir(time) if not name.startswith("_")}
    return types.SimpleNamespace(**{**names, "time": lambda: time.time() + SKEW_S})


def test_a_node_five_minutes_behind_keeps_its_tasks_time_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    skewed = _skewed_time()
    for module in ("tcluster.agent.daemon", "tcluster.agent.tasks", "testkit.fake_runtime"):
        monkeypatch.setattr(f"{module}.time", skewed)

    async def scenario(h: Harness) -> None:
        await h.start_master()
        agent = await h.add_agent("n1")
        spec = jobs_pb2.JobSpec(command=["sleep"], tasks=1, time_limit_s=60)
        spec.resources.cpu, spec.resources.memory = 1, 2**20
        job = await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec))
        running = await h.wait_job(job.id, lambda j: j.tasks[0].state == common_pb2.TASK_RUNNING)
        assert abs(running.tasks[0].started_at - time.time()) < 30, running.tasks[0].started_at   # the master's clock
        await asyncio.sleep(2)                           # ticks: with the agent's start it was due 4 min ago
        assert (await h.job(job.id)).tasks[0].state == common_pb2.TASK_RUNNING
        agent.runtime.finish(agent.runtime.containers()[0], 0)
        done = await h.wait_job(job.id, lambda j: j.state == jobs_pb2.JOB_SUCCEEDED)
        assert done.tasks[0].finished_at >= done.tasks[0].started_at
    run(scenario, tmp_path)


def test_the_offset_is_the_smallest_recent_sample_and_moves_only_timed_reports() -> None:
    clock = AgentClock()
    assert clock.offset_s is None
    report, untimed = TaskReport("j.0", 1, TaskState.RUNNING, at=1000.0), TaskReport("j.1", 1, TaskState.RUNNING)
    assert clock.to_master((report,)) == (report,)                  # nothing heard yet: as sent
    clock.heard(1000.0, 1300.4)                                      # 300 s behind, 0.4 s on the way
    clock.heard(1001.0, 1301.1)
    clock.heard(0.0, 5.0)                                            # an older agent: no send time
    clock.heard(float("nan"), 5.0)
    assert clock.offset_s == pytest.approx(300.1)
    moved = clock.to_master((report, untimed))
    assert moved[0].at == pytest.approx(1300.1) and moved[1].at == 0.0
