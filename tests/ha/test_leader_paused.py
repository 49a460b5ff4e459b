"""HA scenario 2: the leading master is paused (SIGSTOP), not dead, past its lease; a
standby takes over; the old leader resumes and must not act."""

from __future__ import annotations

import json
import subprocess
import time

import grpc
import pytest

from testkit.procs import BIN
from testkit.faultcluster import split_key, task_cgroups, wait_for, wait_value
from tests.faults.watch import Watch, check_consistent
from tests.ha.conftest import MakeHA
from testkit.hacluster import HACluster, Timer, standby_answer
from tcluster.v1 import common_pb2, jobs_pb2

pytestmark = pytest.mark.system
SETTLE_S = 8.0      # after the resume: how long the old leader is watched for any act
AGENT_MOVE_S = 20.0  # the agent fences its tasks after 30 s without a word from its master


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
    the standby leads (time printed) and takes a submit. On SIGCONT the old leader
    launches nothing and writes nothing anyone sees (P/leader is not re-created, no task
    attempt changes, no cgroup but those of the new leader's launches), it answers as a
    standby naming the new leader within seconds (the same pid: it re-executes itself),
    `tcl-master status` says so, and the cluster stays consistent: the task running
    before the pause keeps its attempt, the new job runs once, both end exactly once.
    (Whether agents leave the hung leader during the pause is the next test's subject;
    here the agent may move only once the old leader steps down.)"""
    c = ha(n_masters=2, lease_ttl_s=5, node_timeout_s=15.0, lost_timeout_s=30.0, start_timeout_s=60.0)
    old = c.start_masters()
    new_index = 1 - old
    agent = c.start_agent("ha-pause", cpus="2")
    first = c.jobs.Submit(jobs_pb2.SubmitRequest(spec=_sleep_spec(120, "before-pause")), timeout=10).id
    wait_for(lambda: _task(c, first).state == common_pb2.TASK_RUNNING, 60, f"{first} RUNNING")
    attempt_before = _task(c, first).attempt
    keys_before = _cgroup_keys(c)
    watch = Watch(lambda: c.leader_address, lambda: list(c.agents)).start()
    watch.watch(first)
    old_pid = c.masters[old].pid
    try:
        with Timer(f"paused master {old} -> master {new_index} leads (lease TTL {c.lease_ttl_s} s)") as t:
            c.pause_one(old)
            paused_at = time.monotonic()
            new = c.wait_leader(exclude={old}, timeout_s=30.0, interval_s=0.05)
        print(f"FAILOVER_S={t.s:.2f} (paused leader)")
        assert new == new_index
        # (gRPC to the new leader while the old one is paused: tcl's list is the next test's subject)
        second = c.jobs.Submit(jobs_pb2.SubmitRequest(spec=_sleep_spec(120, "during-pause")), timeout=30).id
        watch.watch(second)
        time.sleep(max(0.0, paused_at + c.lease_ttl_s + 2 - time.monotonic()))   # past the lease: TTL + 2 s
        revision = _leader_revision(c)
        assert _task(c, first).attempt == attempt_before, "the new leader restarted the running task"

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

        # it does not act: for a while, the only leader is the new one, P/leader stays, and no
        # cgroup appears but the new leader's launch of `second` (attempt 1)
        deadline = resumed + SETTLE_S
        allowed = keys_before | {(f"{second}.0", 1)}
        while time.monotonic() < deadline:
            assert _cgroup_keys(c) <= allowed, f"unexpected task cgroups after the resume: {_cgroup_keys(c) - allowed}"
            assert c.leading() == [new], f"leaders after the resume: {c.leading()}"
            time.sleep(0.2)
        assert _leader_revision(c) == revision, "P/leader was re-created after the old leader resumed"
        assert c.leader_key_index() == new

        # consistent: the agent is with the new leader, `second` runs once, `first` never restarted
        c.wait_node(agent.name, "READY", timeout_s=30)
        wait_for(lambda: _task(c, second).state == common_pb2.TASK_RUNNING, 60, f"{second} RUNNING (new leader)")
        assert (_task(c, first).attempt, _task(c, second).attempt) == (attempt_before, 1)
        assert _task(c, first).state == common_pb2.TASK_RUNNING
        assert _cgroup_keys(c) == keys_before | {(f"{second}.0", 1)}, _cgroup_keys(c)
        for job_id in (first, second):
            c.tcl("cancel", job_id)
        for job_id in (first, second):
            job = c.wait_job(job_id, {"CANCELLED", "SUCCEEDED", "FAILED"}, timeout_s=60)
            assert job["state"] == "CANCELLED", job
            assert check_consistent(job) == []
        wait_for(lambda: not _cgroup_keys(c), 30, "no task cgroup left on the agent")
        done = c.submit("true")
        assert c.wait_job(done, {"SUCCEEDED", "FAILED", "CANCELLED"})["state"] == "SUCCEEDED"
    finally:
        violations = watch.stop()
    assert violations == [], violations


def test_agent_and_cli_leave_a_hung_leader(ha: MakeHA) -> None:
    """Proves: when the leader hangs (SIGSTOP: it accepts connections and never answers)
    and a standby takes over, the agent that was attached to it registers with the new
    leader before its own fence (30 s of silence) would stop its tasks, so the task it
    runs keeps running and new work launches; and `tcl --master <hung>,<new>` gives up on
    the hung master and reaches the new leader."""
    c = ha(n_masters=2, lease_ttl_s=5, node_timeout_s=15.0, lost_timeout_s=30.0)
    old = c.start_masters()
    agent = c.start_agent("ha-hung", cpus="2")
    running = c.jobs.Submit(jobs_pb2.SubmitRequest(spec=_sleep_spec(120, "before-hang")), timeout=10).id
    wait_for(lambda: _task(c, running).state == common_pb2.TASK_RUNNING, 60, f"{running} RUNNING")
    registered = c.registrations(agent.name)
    c.pause_one(old)
    try:
        new = c.wait_leader(exclude={old}, timeout_s=30.0)
        with Timer("agent registered with the new leader after the pause") as t:
            wait_for(lambda: c.registrations(agent.name) > registered, AGENT_MOVE_S,
                     f"agent {agent.name} registers with the new leader while the old one hangs")
        print(f"AGENT_MOVED_S={t.s:.2f}")
        order = f"{c.masters[old].address},{c.masters[new].address}"
        with Timer("tcl --master <hung>,<leader> jobs") as t:
            result = subprocess.run([str(BIN / "tcl"), "--master", order, "jobs", "-o", "json"],
                                    capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"exit {result.returncode} after {t.s:.1f} s: {result.stderr[-1000:]}"
        assert running in {job["id"] for job in json.loads(result.stdout)}
        second = c.jobs.Submit(jobs_pb2.SubmitRequest(spec=_sleep_spec(120, "after-hang")), timeout=10).id
        wait_for(lambda: _task(c, second).state == common_pb2.TASK_RUNNING, 60, f"{second} RUNNING")
        task = _task(c, running)
        assert (task.state, task.attempt) == (common_pb2.TASK_RUNNING, 1), task
    finally:
        c.resume_one(old)
        _settle_as_standby(c, old)


def _settle_as_standby(c: HACluster, i: int, timeout_s: float = 30.0) -> None:
    """Waits (without failing: it is not this test's subject) until resumed master i answers
    as a standby. The teardown's SIGTERM is lost when it lands while the master re-executes
    itself to step down, and the fixture then waits 15 s before its SIGKILL."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = standby_answer(c.masters[i].address)
        if answer is not None and "standby" in answer[1]:
            return
        time.sleep(0.1)
