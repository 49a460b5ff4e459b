"""Scenario 5: the agent is SIGKILLed while it launches a task."""

from __future__ import annotations

import signal
import time

import pytest

from testkit.faultcluster import Cluster, split_key, task_cgroups, wait_for
from tests.faults.watch import TERMINAL, Watch, check_consistent
from tcluster.v1 import common_pb2, jobs_pb2

# guest: what the agent finds and kills after a restart comes from its cgroup backend, so
# tests/vm reruns this on cgroup v2 (on SQLite: the guest has no etcd).
pytestmark = [pytest.mark.system, pytest.mark.guest]
KILL_DELAYS_S = (0.0, 0.03, 0.15)    # after the task is seen STARTING: before, during, after the launch
SETTLE_S = 40.0                      # start timeout (10 s) + reconnect + kill grace (10 s) + margin


def _task(cluster: Cluster, job_id: str) -> jobs_pb2.Task:
    return cluster.jobs.Get(jobs_pb2.GetJobRequest(id=job_id), timeout=10).tasks[0]


def _kill_during_launch(cluster: Cluster, node: str, delay_s: float) -> str:
    """Submits `sleep 300` (--retries 1), SIGKILLs the agent `delay_s` after the master
    placed it, restarts the agent; returns the job id."""
    job_id = cluster.submit("sleep", "300", retries=1)
    wait_for(lambda: _task(cluster, job_id).state != common_pb2.TASK_PENDING, 15,
             f"{job_id} placed", interval_s=0.002)
    time.sleep(delay_s)
    cluster.kill_agent(node, signal.SIGKILL)
    print(f"killed {delay_s}s after placement: task {_name(_task(cluster, job_id))}, "
          f"cgroups {[k for k in task_cgroups(node) if k.startswith(job_id)]}")
    cluster.restart_agent(node)
    return job_id


def _name(task: jobs_pb2.Task) -> str:
    return f"a{task.attempt} {common_pb2.TaskState.Name(task.state)}"


def _settled(cluster: Cluster, node: str, job_id: str) -> jobs_pb2.Task | None:
    """The task is RUNNING with exactly its own attempt's cgroup, or terminal with none."""
    task = _task(cluster, job_id)
    keys = [split_key(k) for k in task_cgroups(node) if k.startswith(f"{job_id}.")]
    if task.state == common_pb2.TASK_RUNNING and keys == [(task.id, task.attempt)]:
        return task
    if task.state in TERMINAL and keys == []:
        return task
    return None


def test_agent_killed_during_a_launch_runs_the_task_once(cluster: Cluster) -> None:
    """Proves: an agent SIGKILLed between the master's placement and the task's start
    (before, during or just after the launch) leaves nothing duplicate: after it restarts
    each task either runs as the attempt the master knows (one cgroup) or has ended with no
    cgroup left; no two attempts of a task ever coexist; each task ends exactly once."""
    cluster.start_timeout_s = 10.0
    cluster.start_master()
    a = cluster.start_agent("launch")
    watch = Watch(lambda: cluster.address, lambda: [a.name]).start()
    job_ids = []
    try:
        for delay_s in KILL_DELAYS_S:
            job_ids.append(_kill_during_launch(cluster, a.name, delay_s))
            watch.watch(job_ids[-1])
        for job_id in job_ids:
            wait_for(lambda: _settled(cluster, a.name, job_id), SETTLE_S, f"{job_id} settled to one attempt")
            cluster.tcl("cancel", job_id, check=False)   # ends a running one; refused if already over
        jobs = [cluster.wait_ended(job_id, timeout_s=SETTLE_S) for job_id in job_ids]
        wait_for(lambda: not [k for k in task_cgroups(a.name)], SETTLE_S, "every task's cgroup removed")
    finally:
        violations = watch.stop()
    for job in jobs:
        print("final:", [(t["attempt"], t["state"], t["reason"]) for t in job["tasks"]])
        assert all(t["state"] in {"KILLED", "LOST", "FAILED"} for t in job["tasks"]), job
        assert check_consistent(job, retries=1) == []
    assert violations == []
