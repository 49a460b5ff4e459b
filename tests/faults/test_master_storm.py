"""Scenario 1: the master is SIGKILLed in the middle of a storm of submits."""

from __future__ import annotations

import signal
import threading

import grpc
import pytest

from testkit.faultcluster import Cluster, wait_for
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc

pytestmark = pytest.mark.system
SUBMITS = 200
CLIENTS = 4
KILL_AFTER_ACKS = 80


def _spec(n: int) -> jobs_pb2.JobSpec:
    spec = jobs_pb2.JobSpec(command=["echo", f"storm-{n}"], tasks=1, name=f"storm-{n}")
    spec.resources.cpu, spec.resources.memory = 0.1, 2**20
    return spec


def _client(address: str, numbers: range, acked: dict[str, int], lock: threading.Lock) -> None:
    """Submits one job per number; records every id the master returned."""
    with grpc.insecure_channel(address) as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        for n in numbers:
            try:
                job = stub.Submit(jobs_pb2.SubmitRequest(spec=_spec(n)), timeout=5)
            except grpc.RpcError:
                continue   # the master is gone: this submit was never acknowledged
            with lock:
                acked[job.id] = n


def _storm(cluster: Cluster) -> dict[str, int]:
    """CLIENTS threads submit SUBMITS jobs; the master is SIGKILLed after KILL_AFTER_ACKS acks."""
    acked: dict[str, int] = {}
    lock = threading.Lock()
    per = SUBMITS // CLIENTS
    threads = [threading.Thread(target=_client, args=(cluster.address, range(i * per, (i + 1) * per), acked, lock))
               for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(acked) >= KILL_AFTER_ACKS, 60, f"{KILL_AFTER_ACKS} acknowledged submits", 0.005)
    cluster.kill_master(signal.SIGKILL)
    for thread in threads:
        thread.join(120)
    with lock:
        return dict(acked)


def test_every_acknowledged_submit_survives_a_master_sigkill(cluster: Cluster) -> None:
    """Proves: a job id the master returned is durable. Killed with SIGKILL mid-storm and
    restarted on the same data dir, the master still has every acknowledged job, with the
    spec it was submitted with, and no two acknowledgements share an id."""
    cluster.start_master()
    acked = _storm(cluster)
    assert len(acked) >= KILL_AFTER_ACKS
    cluster.start_master()
    listed = cluster.tcl_json("jobs", "--all")
    assert isinstance(listed, list)
    by_id = {job["id"]: job for job in listed}
    missing = sorted(set(acked) - set(by_id))
    assert missing == [], f"{len(missing)} acknowledged jobs lost by the SIGKILL: {missing[:10]}"
    for job_id, n in acked.items():
        assert by_id[job_id]["command"] == ["echo", f"storm-{n}"], by_id[job_id]
    for job_id in acked:   # each one by id too, through gRPC (200 `tcl status` runs would be slow)
        assert cluster.jobs.Get(jobs_pb2.GetJobRequest(id=job_id), timeout=10).id == job_id
    newest = sorted(acked, key=lambda j: acked[j])[-5:]   # the last acks are the likeliest lost
    for job_id in newest:
        assert cluster.status(job_id)["id"] == job_id


def test_jobs_lists_the_newest_100_by_default(cluster: Cluster) -> None:
    """Proves the listing contract on a master with more than 100 jobs: `tcl jobs` gives the
    100 newest, `--limit N` the N newest, `--all` every job."""
    cluster.start_master()
    ids = [cluster.jobs.Submit(jobs_pb2.SubmitRequest(spec=_spec(n)), timeout=10).id for n in range(120)]
    default, limited, everything = (cluster.tcl_json("jobs", *flags) for flags in ((), ("--limit", "7"), ("--all",)))
    assert isinstance(default, list) and isinstance(limited, list) and isinstance(everything, list)
    assert len(default) == 100 and len(limited) == 7
    assert sorted(j["id"] for j in everything) == sorted(ids)
    newest = {job["id"] for job in everything if job["name"] in {f"storm-{n}" for n in range(113, 120)}}
    assert {job["id"] for job in limited} == newest
