"""What a task learns about itself (README, "What a job does"), and the kill grace a
preemption asks for reaching the agent's timer."""

from __future__ import annotations

import signal

from tcluster.agent.taskstate import AgentTasks, ArmGrace, KillAsked, Launched, LaunchAsked, Signal
from tcluster.agent.tasks import task_identity_env
from tcluster.domain.launch import Launch
from tcluster.domain.model import JobSpec
from tcluster.domain.resources import Resources

SPEC = JobSpec(("true",), Resources(cpu=1), tasks=5)


def test_every_task_knows_its_job_index_count_and_attempt() -> None:
    env = dict(task_identity_env(Launch("abcd0123.3", 2, "abcd0123", 3, SPEC)))
    assert env == {"TCL_JOB_ID": "abcd0123", "TCL_TASK_INDEX": "3", "TCL_TASK_COUNT": "5", "TCL_ATTEMPT": "2"}


def test_a_preempted_task_is_told_on_its_next_start() -> None:
    env = dict(task_identity_env(Launch("abcd0123.0", 3, "abcd0123", 0, SPEC, preemptions=2)))
    assert (env["TCL_PREEMPTED"], env["TCL_PREEMPTIONS"], env["TCL_ATTEMPT"]) == ("1", "2", "3")


def test_the_kill_grace_travels_to_the_timer_also_when_asked_while_launching() -> None:
    tasks = AgentTasks(Resources(cpu=4, memory=2**30), Resources())
    launch = Launch("abcd0123.0", 1, "abcd0123", 0, SPEC)
    tasks.handle(LaunchAsked(launch, 1.0))
    assert tasks.handle(KillAsked("abcd0123.0", 1, "preempted", 2.0, grace_s=30.0)) == []
    actions = tasks.handle(Launched(launch.key, 3.0))
    assert Signal(launch.key, signal.SIGTERM) in actions and ArmGrace(launch.key, 30.0) in actions


def test_a_kill_without_a_grace_uses_the_agents() -> None:
    tasks = AgentTasks(Resources(cpu=4, memory=2**30), Resources())
    launch = Launch("abcd0123.0", 1, "abcd0123", 0, SPEC)
    tasks.handle(LaunchAsked(launch, 1.0))
    tasks.handle(Launched(launch.key, 2.0))
    assert ArmGrace(launch.key, 0.0) in tasks.handle(KillAsked("abcd0123.0", 1, "cancelled", 3.0))
