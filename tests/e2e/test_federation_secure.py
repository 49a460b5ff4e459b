"""A secure LM through the real binaries (issue 25): `tcl-master init` + `--federation-lm-id`,
a joined cgroup v1 agent, `tcl-master gm issue`, and `tcl-gm --lm-tls` dialling the master's
mutual-TLS agent port: a federated task runs there; a certificate of another cluster's CA
stops tcl-gm at start with the reason; `tcl-master gm revoke` twice says the second time
that nothing is left to revoke."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

import grpc
import pytest

from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2
from testkit.procs import BIN, Proc, cgroup_v1_usable, leaked_cgroups, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / args[0]), *args[1:]], capture_output=True, text=True, timeout=60)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_gm_with_a_cluster_certificate_runs_a_task_on_a_secure_lm(tmp_path: Path) -> None:
    data, node = tmp_path / "m0", f"e2e-fedsec-{os.getpid()}-{uuid.uuid4().hex[:4]}"
    assert _run("tcl-master", "init", "--data-dir", str(data)).returncode == 0
    master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(data), "--http", "off",
                   "--federation-lm-id", "0", "--federation-gms", "1", "--federation-state-interval-s", "1",
                   "--heartbeat-interval-s", "0.5"], tmp_path / "m0.log")
    procs = [master]
    try:
        port, agent_port = master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+) \(TLS\), agents on port (\d+)").groups()
        token = json.loads(_run("tcl-master", "join-token", "create", "--data-dir", str(data), "-o", "json").stdout)["token"]
        joined = _run("tcl-agent", "join", "--master", f"127.0.0.1:{port}", "--token", token, "--node", node,
                      "--state-dir", str(tmp_path / node))
        assert joined.returncode == 0, joined.stderr
        procs.append(Proc([str(BIN / "tcl-agent"), "--state-dir", str(tmp_path / node), "--runtime", "cgroup1",
                           "--cpus", "2", "--memory", "2Gi"], tmp_path / "agent.log"))
        procs[-1].wait_for_output(r"registered with")
        issued = _run("tcl-master", "gm", "issue", "gm0", "--out", str(tmp_path / "gm0-lm0"), "--data-dir", str(data))
        assert issued.returncode == 0 and "CN gm:gm0" in issued.stdout, issued.stderr

        other = tmp_path / "other"                      # a GM certificate of another cluster, with this one's CA
        assert _run("tcl-master", "init", "--data-dir", str(other)).returncode == 0
        assert _run("tcl-master", "gm", "issue", "gm0", "--out", str(tmp_path / "wrong"), "--data-dir", str(other)).returncode == 0
        shutil.copy(tmp_path / "gm0-lm0" / "ca.pem", tmp_path / "wrong" / "ca.pem")
        gm_port = _port()
        base = ["--name", "gm0", "--listen", f"127.0.0.1:{gm_port}", "--lms", f"lm0=127.0.0.1:{agent_port}",
                "--queue-map", "a=gm0", "--state-dir", str(tmp_path / "gm0")]
        wrong = _run("tcl-gm", *base, "--lm-tls", f"lm0={tmp_path / 'wrong'}")
        assert wrong.returncode == 2 and "was not issued by" in wrong.stderr, wrong.stderr

        procs.append(Proc([str(BIN / "tcl-gm"), *base, "--lm-tls", f"lm0={tmp_path / 'gm0-lm0'}"], tmp_path / "gm0.log"))
        procs[-1].wait_for_output(r"serving on port")
        stub = federation_pb2_grpc.GlobalManagerServiceStub(grpc.insecure_channel(f"127.0.0.1:{gm_port}"))
        spec = jobs_pb2.JobSpec(queue="a", tasks=2, command=["sh", "-c", "exit 0"],
                                resources=common_pb2.Resources(cpu=0.25, memory=32 * 2**20))
        job_id = stub.Submit(fpb.FedSubmitRequest(spec=spec), timeout=30).id
        wait_until(lambda: stub.Get(fpb.FedGetRequest(id=job_id), timeout=10).state == "SUCCEEDED", 60)
        job = stub.Get(fpb.FedGetRequest(id=job_id), timeout=10)
        assert {(t.lm, t.exit_code) for t in job.tasks} == {("lm0", 0)}, job

        assert _run("tcl-master", "gm", "revoke", "gm0", "--data-dir", str(data)).returncode == 0
        again = _run("tcl-master", "gm", "revoke", "gm0", "--data-dir", str(data))
        assert again.returncode == 1 and "holds no live certificate" in again.stderr, again.stderr
    finally:
        for p in reversed(procs):
            p.stop()
    assert leaked_cgroups(node) == []
