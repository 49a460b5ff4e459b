"""HA scenario 1: the leading master is SIGKILLed while tasks run and while a storm of
submits is in flight; a standby takes over."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter

import pytest

from testkit.procs import BIN
from testkit.faultcluster import split_key, task_cgroups, wait_for, wait_value
from tests.faults.watch import JOB_TERMINAL, Watch, check_consistent
from tests.ha.conftest import MakeHA
from testkit.hacluster import HACluster, Timer
from tests.ha.storm import Storm
from tcluster.v1 import common_pb2, jobs_pb2

pytestmark = pytest.mark.system
RUNNERS = 4              # `sleep` jobs running through the failover
RUN_S = 30               # long enough to outlive the failover, short enough for the suite
STORM = 100
KILL_AFTER_ACKS = 30


def _attempts(ha: HACluster, job_ids: list[str], states: set[str]) -> dict[str, tuple[str, int]]:
    """task id -> (node, attempt) for the tasks of these jobs now in `states` (gRPC, leader)."""
    seen = {}
    for job_id in job_ids:
        task = ha.jobs.Get(jobs_pb2.GetJobRequest(id=job_id), timeout=10).tasks[0]
        if common_pb2.TaskState.Name(task.state).removeprefix("TASK_") in states:
            seen[task.id] = (task.node, task.attempt)
    return seen


def _cgroup_attempts(ha: HACluster) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for node in ha.agents:
        for key in task_cgroups(node):
            task_id, attempt = split_key(key)
            found.setdefault(task_id, set()).add(attempt)
    return found


def test_leader_sigkill_during_a_storm_loses_nothing_and_runs_each_task_once(ha: MakeHA) -> None:
    """Proves: with three masters on one etcd, SIGKILL of the leader mid-storm hands over to
    a standby (the time is printed); every acknowledged submit exists on the new leader with
    its spec, and every submit of the storm (sent again with its request id when its outcome
    was unknown) made exactly one job; tasks running at the kill keep running (same node, same attempt, their
    cgroups never gone) and each ends exactly once; both agents register with the new
    leader; `tcl` with the master list (the dead one first) keeps working."""
    c = ha(n_masters=3, lease_ttl_s=5, node_timeout_s=15.0, lost_timeout_s=30.0, start_timeout_s=60.0)
    old = c.start_masters()
    agents = [c.start_agent(f"ha-kill-{x}", cpus="2") for x in "ab"]
    runners = [c.submit("sleep", str(RUN_S)) for _ in range(RUNNERS)]
    before = wait_value(lambda: _attempts(c, runners, {"RUNNING"}), lambda r: len(r) == RUNNERS, 60,
                        f"{RUNNERS} sleep tasks RUNNING", interval_s=0.2)
    registered = {a.name: c.registrations(a.name) for a in agents}
    watch = Watch(lambda: c.leader_address, lambda: list(c.agents)).start()
    watch.watch(*runners)
    storm = Storm([m.address for m in c.masters], submits=STORM).start()
    try:
        wait_for(lambda: storm.count() >= KILL_AFTER_ACKS, 60, f"{KILL_AFTER_ACKS} acknowledged submits", 0.005)
        with Timer(f"failover: master {old} SIGKILLed -> another master leads (lease TTL {c.lease_ttl_s} s)") as t:
            c.kill_one(old, signal.SIGKILL)
            new = c.wait_leader(exclude={old}, timeout_s=30.0, interval_s=0.02)
        print(f"FAILOVER_S={t.s:.2f} (master {old} -> master {new})")
        assert new != old
        assert wait_for(lambda: c.leader_key_index() == new, 10, f"P/leader names master {new}")

        # tasks running at the kill keep running (or have just ended): same node, same attempt,
        # and a cgroup of that attempt only while RUNNING
        during = _attempts(c, runners, {"RUNNING", "SUCCEEDED"})
        assert during == before, f"running tasks moved or restarted across the failover: {before} -> {during}"
        still = _attempts(c, runners, {"RUNNING"})
        cgroups = _cgroup_attempts(c)
        for task_id, (_node, attempt) in still.items():
            assert cgroups.get(task_id) == {attempt}, f"{task_id}: cgroups of attempts {cgroups.get(task_id)}"
        storm.join(180)
        print(storm.report())

        # every acknowledged submit exists on the new leader, with its spec
        jobs = c.all_jobs()
        missing = sorted(set(storm.acked) - set(jobs))
        assert missing == [], f"{len(missing)} acknowledged submits lost by the failover: {missing[:10]}"
        for job_id, n in storm.acked.items():
            assert list(jobs[job_id].spec.command) == ["echo", f"storm-{n}"], jobs[job_id].spec
        assert len(storm.acked) + len(storm.unknown) + len(storm.refused) == STORM
        # sent again with their request ids after unknown outcomes, every submit made exactly one job
        assert storm.unknown == [] and storm.refused == [], storm.report()
        made = Counter(j.spec.name for j in jobs.values() if j.spec.name.startswith("storm-"))
        assert sorted(made) == sorted(f"storm-{n}" for n in range(STORM)), storm.report()
        twice = {name: k for name, k in made.items() if k > 1}
        assert twice == {}, f"submits that made more than one job: {twice}"

        # both agents register again, with the new leader
        for a in agents:
            wait_for(lambda: c.registrations(a.name) > registered[a.name], 30, f"{a.name} registers again")
            c.wait_node(a.name, "READY", timeout_s=30)

        # the CLI with the master list, the dead master first
        order = [c.masters[old].address] + [m.address for m in c.masters if m.index != old]
        listed = subprocess.run([str(BIN / "tcl"), "--master", ",".join(order), "jobs", "--limit", "5", "-o", "json"],
                                capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr[-2000:]

        # each task ends exactly once: the runners SUCCEEDED on attempt 1, every storm job too
        for job_id in runners:
            job = c.wait_job(job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout_s=RUN_S + 60)
            task = job["tasks"][0]
            assert (job["state"], task["attempt"]) == ("SUCCEEDED", before[task["id"]][1]), job
            assert check_consistent(job) == []
        watch.watch(*list(storm.acked)[:10])
        ended = wait_value(c.all_jobs, lambda j: all(j[i].state in JOB_TERMINAL for i in storm.acked),
                           180, f"{len(storm.acked)} storm jobs ended", interval_s=1.0)
        wrong = [(i, jobs_pb2.JobState.Name(ended[i].state), [(t.attempt, t.failures, t.reason) for t in ended[i].tasks])
                 for i in storm.acked if ended[i].state != jobs_pb2.JOB_SUCCEEDED
                 or any(t.failures != 0 for t in ended[i].tasks)]
        assert wrong == [], f"storm jobs not SUCCEEDED without a failure: {wrong[:10]}"
        # A task placed by the old leader whose launch died with it is placed again by the new one
        # (attempt 2, no failure counted): the Watch above checks no two attempts ever ran at once.
        again = {i: [t.attempt for t in ended[i].tasks] for i in storm.acked if any(t.attempt > 1 for t in ended[i].tasks)}
        print(f"storm jobs placed again after the failover (launch lost with the old leader): {again}")
    finally:
        violations = watch.stop()
        storm.join(180)
        print(storm.report())
    assert violations == [], violations

    # the killed master comes back as a standby; the leader stays
    c.start_one(old)
    wait_for(lambda: c.leading() == [new], 30, f"master {new} alone leads with {old} back")
    assert c.leader_key_index() == new
    expected = {m.index: ("leader" if m.index == new else "standby") for m in c.masters}
    wait_for(lambda: c.status_roles() == expected, 30, f"tcl-master status shows {expected}")
