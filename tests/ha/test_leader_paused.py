"""HA scenario 2: the leading master is paused (SIGSTOP), not dead, past its lease; a
standby takes over; the old leader resumes and must not act."""

from __future__ import annotations

import json
import subprocess
import time

import grpc
import pytest

from tests.e2e.procs import BIN
from tests.faults.cluster import split_key, task_cgroups, wait_for, wait_value
from tests.faults.watch import Watch, check_consistent
from tests.ha.conftest import MakeHA
from tests.ha.hacluster import HACluster, Timer, standby_answer
from tcluster.v1 import common_pb2, jobs_pb2

pytestmark = pytest.mark.system
SETTLE_S = 8.0      # after the resume: how long the old leader is watched for any act


def _sleep_spec(seconds: int, name: str) -> jobs_pb2.JobSpec:
    spec = jobs_pb2.JobSpec(command=["sleep", str(seconds)], tasks=1, name=name)
    spec.resources.cpu, spec.resources.memory = 0.1, 2**24
    return spec


def _task(c: HACluster, job_id: str) -> jobs_pb2.Task:
    return c.jobs.Get(jobs_pb2.GetJobRequest(id=job_id), timeout=10).tasks[0]


def _cgroup_keys(c: HACluster) -> set[tuple[str, int]]:
    return {split_key(k) for node in c.agents for k in task_cgroups(node)}


def _leader_revision(c: HACluster) -> int | None:
    """create_revision of P/leader: it changes only when some master wins an election."""
    assert c.etcd is not None
    out = c.etcd.cluster.etcdctl("get", f"{c.etcd.prefix}/leader", "-w", "json").stdout
    kvs = json.loads(out).get("kvs") or []
    return int(kvs[0]["create_revision"]) if kvs else None


def test_paused_leader_is_replaced_and_does_not_act_when_it_resumes(ha: MakeHA) -> None:
    """Proves fencing against a paused process: SIGSTOP the leader for its lease TTL + 2 s;
    the standby leads (time printed), keeps the running task and launches new work; on
    SIGCONT the old leader launches nothing and writes nothing that anyone sees (no new
    cgroup, no task attempt changes, P/leader is not re-created), it answers as a standby
    naming the new leader within seconds (the same pid: it re-executes itself), and the
    cluster stays consistent: both tasks end exactly once."""
    c = ha(n_masters=2, lease_ttl_s=5, node_timeout_s=15.0, lost_timeout_s=30.0, start_timeout_s=60.0)
    old = c.start_masters()
    new_index = 1 - old
    agent = c.start_agent("ha-pause", cpus="2")
    first = c.jobs.Submit(jobs_pb2.SubmitRequest(spec=_sleep_spec(60, "before-pause")), timeout=10).id
    wait_for(lambda: _task(c, first).state == common_pb2.TASK_RUNNING, 60, f"{first} RUNNING")
    attempt_before = _task(c, first).attempt
    watch = Watch(lambda: c.leader_address, lambda: list(c.agents)).start()
    watch.watch(first)
    old_pid = c.masters[old].pid
    registered = c.registrations(agent.name)
    try:
        with Timer(f"paused master {old} -> master {new_index} leads (lease TTL {c.lease_ttl_s} s)") as t:
            c.pause_one(old)
            paused_at = time.monotonic()
            new = c.wait_leader(exclude={old}, timeout_s=30.0, interval_s=0.05)
        print(f"FAILOVER_S={t.s:.2f} (paused leader)")
        assert new == new_index
        time.sleep(max(0.0, paused_at + c.lease_ttl_s + 2 - time.monotonic()))   # past the lease: TTL + 2 s
        # the agent leaves the hung master for the new leader (before its fence stops the tasks)
        wait_for(lambda: c.registrations(agent.name) > registered, 20,
                 f"agent {agent.name} registers with the new leader while the old one is paused")
        second = c.jobs.Submit(jobs_pb2.SubmitRequest(spec=_sleep_spec(60, "during-pause")), timeout=30).id
        watch.watch(second)
        # (gRPC to the leader while the old one is paused: tcl with the list is the other test's subject)
        wait_for(lambda: _task(c, second).state == common_pb2.TASK_RUNNING, 60, f"{second} RUNNING (new leader)")
        assert _task(c, first).attempt == attempt_before, "the new leader restarted the running task"
        keys_before = _cgroup_keys(c)
        revision = _leader_revision(c)

        c.resume_one(old)
        resumed = time.monotonic()
        # it steps down: a standby that names the new leader, same pid
        # (while it re-executes itself its port is closed for a moment: wait for the standby's answer)
        answer = wait_value(lambda: standby_answer(c.masters[old].address), lambda a: a is not None and "standby" in a[1],
                            30, f"resumed master {old} answers as a standby")
        assert answer is not None
        code, details, hint = answer
        print(f"resumed master {old} answers {code.name} within {time.monotonic() - resumed:.2f} s: {details!r}, "
              f"tcl-leader {hint!r}")
        assert code == grpc.StatusCode.UNAVAILABLE, answer
        wait_value(lambda: standby_answer(c.masters[old].address),
                   lambda a: a is not None and a[2] == c.masters[new].address, 30,
                   f"master {old} names master {new} as the leader (tcl-leader metadata)")
        assert c.masters[old].alive() and c.masters[old].pid == old_pid, "the old leader exited instead of stepping down"
        roles = wait_value(c.status_roles, lambda r: r == {old: "standby", new: "leader"}, 30,
                           f"tcl-master status: master {old} standby, {new} leader")
        print(f"tcl-master status: {roles}")

        # it does not act: watched for a while, nothing launched, nothing changed
        deadline = resumed + SETTLE_S
        while time.monotonic() < deadline:
            assert _cgroup_keys(c) == keys_before, f"task cgroups changed after the resume: {keys_before} -> {_cgroup_keys(c)}"
            assert c.leading() == [new], f"leaders after the resume: {c.leading()}"
            time.sleep(0.2)
        assert _leader_revision(c) == revision, "P/leader was re-created after the old leader resumed"
        assert (_task(c, first).attempt, _task(c, second).attempt) == (attempt_before, 1)
        assert c.leader_key_index() == new

        # the cluster stays consistent: both tasks end once
        for job_id in (first, second):
            c.tcl("cancel", job_id)
        for job_id in (first, second):
            job = c.wait_job(job_id, {"CANCELLED", "SUCCEEDED", "FAILED"}, timeout_s=60)
            assert job["state"] == "CANCELLED", job
            assert check_consistent(job) == []
        wait_for(lambda: not _cgroup_keys(c), 30, "no task cgroup left on the agent")
        done = c.submit("true")
        assert c.wait_job(done, {"SUCCEEDED", "FAILED", "CANCELLED"})["state"] == "SUCCEEDED"
        c.wait_node(agent.name, "READY")
    finally:
        violations = watch.stop()
    assert violations == [], violations


def test_cli_skips_a_paused_master_in_its_list(ha: MakeHA) -> None:
    """Proves: a master that accepts connections but never answers (SIGSTOP: a hung host)
    first in `tcl --master` does not stop the CLI: it gives up on that one and reaches the
    leader behind it. (A standby is paused, so there is no failover here.)"""
    c = ha(n_masters=2, lease_ttl_s=5)
    leader = c.start_masters()
    standby = 1 - leader
    c.pause_one(standby)
    try:
        order = f"{c.masters[standby].address},{c.masters[leader].address}"
        with Timer("tcl --master <paused>,<leader> jobs") as t:
            result = subprocess.run([str(BIN / "tcl"), "--master", order, "jobs", "-o", "json"],
                                    capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"exit {result.returncode} after {t.s:.1f} s: {result.stderr[-1000:]}"
        assert json.loads(result.stdout) == []
    finally:
        c.resume_one(standby)
