"""HA scenario 4 (issue 25): one Megha LM is two tcl-masters on etcd; the leader is
SIGKILLed while a tcl-gm places a burst of federated tasks on it."""

from __future__ import annotations

import collections
import signal
import socket

import grpc
import pytest

from testkit.faultcluster import wait_for
from testkit.hacluster import HACluster, Timer
from testkit.procs import BIN, Proc
from tests.ha.conftest import MakeHA
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2, jobs_pb2_grpc

pytestmark = pytest.mark.system
FED_TASK = "tcluster.io/federation-task"
BURST = 30
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _layout_epoch(address: str) -> int:
    """The epoch of the layout this LM master publishes now (the first update of a Subscribe)."""
    with grpc.insecure_channel(address) as ch:
        call = federation_pb2_grpc.LocalManagerServiceStub(ch).Subscribe(
            fpb.SubscribeRequest(gm=0, gm_name="probe"), timeout=10)
        try:
            first = next(iter(call))
        finally:
            call.cancel()
    assert first.WhichOneof("kind") == "layout", first
    return first.layout.epoch


def _place(address: str, epoch: int, task_id: str = "probe-job.0",
           request_id: str = "probe-job.0:0") -> fpb.PlaceAnswer:
    task = fpb.FedTask(task_id=task_id, queue="default", req=fpb.Res(v=[100, 16]),
                       spec=jobs_pb2.JobSpec(command=["true"]))
    req = fpb.PlaceRequest(request_id=request_id, gm=0, epoch=epoch, node=0, task=task,
                           launch=fpb.LaunchHere())
    with grpc.insecure_channel(address) as ch:
        return federation_pb2_grpc.LocalManagerServiceStub(ch).Place(req, timeout=10)


def _lm_jobs(c: HACluster, job_id: str) -> list[jobs_pb2.Job]:
    jobs = jobs_pb2_grpc.JobServiceStub(grpc.insecure_channel(c.leader_address))
    listed = jobs.List(jobs_pb2.ListJobsRequest(all=True), timeout=10).jobs
    return [j for j in listed if j.spec.labels.get(FED_TASK, "").startswith(job_id + ".")]


def _launches(c: HACluster, job_id: str) -> collections.Counter[str]:
    return collections.Counter(j.spec.labels[FED_TASK] for j in _lm_jobs(c, job_id))


def test_lm_leader_sigkill_mid_burst_runs_each_federated_task_once(ha: MakeHA) -> None:
    """Proves: the LM's epoch changes with its leader; a GM (tcl-gm with `lm0=m0|m1`) whose
    LM leader is SIGKILLed mid-burst re-subscribes to the new leader and every task of its
    job runs exactly once (one LM job per federated task id) and the job ends SUCCEEDED; a
    Place stamped with the old leader's epoch is refused StaleEpoch by the new leader, unless
    its request id is one the old leader wrote: then it gets that job back."""
    c = ha(n_masters=2, lease_ttl_s=2, node_timeout_s=15.0, lost_timeout_s=30.0,
           master_extra=("--federation-lm-id", "0", "--federation-gms", "1", "--federation-state-interval-s", "1"))
    old = c.start_masters()
    for x in "ab":
        c.start_agent(f"ha-fed-{x}", cpus="2")
    old_epoch = _layout_epoch(c.masters[old].address)
    port = _port()
    gm = Proc([str(BIN / "tcl-gm"), "--name", "gm0", "--index", "0", "--listen", f"127.0.0.1:{port}",
               "--lms", "lm0=" + "|".join(m.address for m in c.masters), "--gms", f"gm0=127.0.0.1:{port}",
               "--state-dir", str(c.tmp / "gm0"), "--view-max-age-s", "3"], c.tmp / "gm0.log")
    try:
        gm.wait_for_output(r"serving on port")
        stub = federation_pb2_grpc.GlobalManagerServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        spec = jobs_pb2.JobSpec(queue="default", tasks=BURST, command=["sleep", "0.5"], name="fed-ha",
                                resources=common_pb2.Resources(cpu=0.1, memory=32 * 2**20))
        job_id = stub.Submit(fpb.FedSubmitRequest(spec=spec), timeout=30).id
        wait_for(lambda: len(_launches(c, job_id)) >= 3, 30, "the burst started on the LM", 0.02)
        with Timer(f"LM failover: master {old} SIGKILLed mid-burst") as t:
            c.kill_one(old, signal.SIGKILL)
            new = c.wait_leader(exclude={old}, timeout_s=30.0, interval_s=0.02)
        print(f"FED_FAILOVER_S={t.s:.2f} (master {old} -> master {new})")
        new_epoch = _layout_epoch(c.masters[new].address)
        assert new_epoch > old_epoch, (old_epoch, new_epoch)
        answer = _place(c.masters[new].address, old_epoch)
        assert answer.WhichOneof("outcome") == "refused" and answer.refused.epoch == new_epoch, answer
        # a request the old leader wrote, resent with its old epoch (the GM's unanswered
        # resend): the new leader answers from its request index, the same job, no second one
        first = min(_lm_jobs(c, job_id), key=lambda j: j.submitted_at)
        again = _place(c.masters[new].address, old_epoch, first.spec.labels[FED_TASK], first.spec.request_id)
        assert again.WhichOneof("outcome") == "launched" and again.launched.job_id == first.id, again

        def done() -> fpb.FedJob | None:
            job = stub.Get(fpb.FedGetRequest(id=job_id), timeout=10)
            return job if job.state in TERMINAL else None
        job = wait_for(done, 45, f"federated job {job_id} ends", 0.2)
        launches = _launches(c, job_id)
        print(f"LM failover mid-burst: {len(launches)} tasks, {sum(launches.values())} LM jobs, job {job.state}")
        assert job.state == "SUCCEEDED", collections.Counter(t.state for t in job.tasks)
        assert len(launches) == BURST and set(launches.values()) == {1}, launches
    finally:
        gm.stop()
