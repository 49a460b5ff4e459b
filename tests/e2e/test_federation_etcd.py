"""Megha's federation with membership in etcd (tcl-gm --etcd), through the real binaries:
test_federation.py's two LMs (tcl-master, two real cgroup v1 agents each) and two GMs, on a
real etcd. gm0 SIGKILLed right after acknowledging a burst: within its lease TTL plus slack,
Submits for its queue go to gm1 and run on an LM; gm0 restarted on its state dir finishes
the burst it had acknowledged, each task launched once, and takes its queue back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from tests.e2e.test_federation import Federation
from testkit.etcd_single import SingleEtcd, single_etcd  # noqa: F401  (the fixture)
from testkit.procs import BIN, Proc, cgroup_v1_usable, wait_until
from tcluster.v1 import federation_pb2 as fpb

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
TTL_S = 2


class EtcdFederation(Federation):
    def __init__(self, tmp: Path, etcd: SingleEtcd) -> None:
        self.etcd, self.prefix = etcd, f"/e2e-gm-{uuid.uuid4().hex[:8]}"
        super().__init__(tmp)

    def start_gm(self, g: int) -> None:
        lms = ",".join(f"lm{i}={a}" for i, a in enumerate(self.addresses))
        gms = ",".join(f"gm{k}=127.0.0.1:{p}" for k, p in enumerate(self.gm_ports))
        gm = Proc([str(BIN / "tcl-gm"), "--name", f"gm{g}", "--index", str(g), "--listen",
                   f"127.0.0.1:{self.gm_ports[g]}", "--lms", lms, "--gms", gms, "--queue-map", "a=gm0,b=gm1",
                   "--state-dir", str(self.tmp / f"gm{g}"), "--view-max-age-s", "3", "--etcd", self.etcd.endpoint,
                   "--etcd-prefix", self.prefix, "--member-ttl-s", str(TTL_S)], self.tmp / f"gm{g}.{time.time()}.log")
        gm.wait_for_output(r"serving on port")
        self.gms[g] = gm


@pytest.fixture
def efed(tmp_path: Path, single_etcd: SingleEtcd) -> Iterator[EtcdFederation]:
    f = EtcdFederation(tmp_path, single_etcd)
    try:
        yield f
    finally:
        f.close()


def _submit_a_via_gm1(fed: EtcdFederation, got: list[str], gm_prefix: str) -> bool:
    """Submits to queue a through gm1; True once the job landed on the GM wanted."""
    try:
        got.append(fed.submit(1, "a", 2, "sh", "-c", "exit 0"))
    except grpc.RpcError as e:      # gm0 not known dead yet (forward refused), or not yet claimed
        assert e.code() == grpc.StatusCode.UNAVAILABLE, e.details()
        return False
    return got[-1].startswith(gm_prefix)


def test_a_killed_gms_queue_is_taken_over_and_its_burst_finishes_once_after_restart(efed: EtcdFederation) -> None:
    status = efed.gm(1).Status(fpb.FedStatusRequest(), timeout=10)
    assert status.membership.startswith("etcd ") and {g.name: g.alive for g in status.members} == {"gm0": True,
                                                                                               "gm1": True}
    burst = efed.submit(0, "a", 24, "sleep", "1", cpu=0.5)          # more than fits at once (16 slots)
    assert efed.gms[0] is not None
    efed.gms[0].stop(signal.SIGKILL)
    killed = time.monotonic()
    got: list[str] = []
    wait_until(lambda: _submit_a_via_gm1(efed, got, "f1-"), TTL_S + 15)
    print(f"queue a taken over by gm1 {time.monotonic() - killed:.1f} s after gm0's SIGKILL (TTL {TTL_S} s)")
    assert got == [got[-1]], got             # nothing was accepted before the takeover
    taken = got[-1]
    job = efed.wait_job(taken)
    assert job.state == "SUCCEEDED" and job.gm == "gm1", job
    gm1 = {g.name: g for g in efed.gm(1).Status(fpb.FedStatusRequest(), timeout=10).members}
    assert (gm1["gm0"].alive, list(gm1["gm1"].taken_over)) == (False, ["a"]), gm1
    shown = subprocess.run([str(BIN / "tcl"), "--federation", f"127.0.0.1:{efed.gm_ports[1]}", "-o", "json",
                            "federation", "status"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "TCL_FEDERATION": ""})
    members = {m["name"]: m for m in json.loads(shown.stdout)["members"]}     # what an operator reads
    assert (members["gm0"]["alive"], members["gm1"]["taken_over"]) == (False, ["a"]), shown

    efed.start_gm(0)                                                 # back on its state dir
    job = efed.wait_job(burst, timeout_s=120)
    launches = efed.launches(burst)
    assert job.state == "SUCCEEDED" and len(launches) == 24 and set(launches.values()) == {1}, launches
    got.clear()
    wait_until(lambda: _submit_a_via_gm1(efed, got, "f0-"), TTL_S + 15)      # gm0 reclaimed its home queue
    for job_id in got:
        assert efed.wait_job(job_id).state == "SUCCEEDED"
