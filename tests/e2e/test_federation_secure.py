"""A secure LM through the real binaries (issue 25): `tcl-master init` + `--federation-lm-id`,
a joined cgroup v1 agent, `tcl-master gm issue`, and `tcl-gm --lm-tls` dialling the master's
mutual-TLS agent port: a federated task runs there; a certificate of another cluster's CA
stops tcl-gm at start with the reason; `tcl-master gm revoke` twice says the second time
that nothing is left to revoke.

Issue 35, one identity from user to task, on the same cluster: a raw Submit without
credentials is refused; alice's tasks run as her Unix mapping on the LM (`nobody`), and
asking for another Unix user is refused as on the LM; bob can neither read, list nor cancel
her job; the GM's certificate alone cannot Place (it names no user) nor act as GM 1."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Callable

import grpc
import pytest

from tcluster.security.channel import TLS_OPTIONS
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2
from testkit.procs import BIN, Proc, cgroup_v1_usable, leaked_cgroups, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / args[0]), *args[1:]], capture_output=True, text=True, timeout=60)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _user(data: Path, name: str, unix_user: str) -> tuple[tuple[str, str], ...]:
    made = _run("tcl-master", "user", "add", name, "--unix-user", unix_user, "--queues", "a,default",
                "--data-dir", str(data))
    assert made.returncode == 0, made.stderr
    return (("authorization", f"Bearer {made.stdout.strip()}"),)


def _refused(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


def _identity_checks(stub: federation_pb2_grpc.GlobalManagerServiceStub, data: Path, gm_tls: Path,
                     agent_port: str) -> None:
    alice, bob = _user(data, "alice", "nobody"), _user(data, "bob", "daemon")
    as_nobody = ["sh", "-c", 'test "$(id -u)" = "$(id -u nobody)"']      # exit 0 only as alice's mapping
    spec = jobs_pb2.JobSpec(queue="a", tasks=2, command=as_nobody,
                            resources=common_pb2.Resources(cpu=0.25, memory=32 * 2**20))
    raw = _refused(lambda: stub.Submit(fpb.FedSubmitRequest(spec=spec), timeout=30))
    assert raw.code() == grpc.StatusCode.UNAUTHENTICATED, raw           # review 649a338 §2 T1: was accepted
    other = jobs_pb2.JobSpec(user="daemon")
    other.MergeFrom(spec)
    named = _refused(lambda: stub.Submit(fpb.FedSubmitRequest(spec=other), timeout=30, metadata=alice))
    assert named.code() == grpc.StatusCode.PERMISSION_DENIED and "only admins" in named.details(), named
    job_id = stub.Submit(fpb.FedSubmitRequest(spec=spec), timeout=30, metadata=alice).id
    wait_until(lambda: stub.Get(fpb.FedGetRequest(id=job_id), timeout=10, metadata=alice).state
               in ("SUCCEEDED", "FAILED"), 60)
    job = stub.Get(fpb.FedGetRequest(id=job_id), timeout=10, metadata=alice)
    assert job.owner == "alice" and {(t.lm, t.exit_code) for t in job.tasks} == {("lm0", 0)}, job
    assert _refused(lambda: stub.Get(fpb.FedGetRequest(id=job_id), timeout=10, metadata=bob)).code() == \
        grpc.StatusCode.PERMISSION_DENIED
    assert _refused(lambda: stub.Cancel(fpb.FedCancelRequest(id=job_id), timeout=10, metadata=bob)).code() == \
        grpc.StatusCode.PERMISSION_DENIED
    assert list(stub.List(fpb.FedListRequest(), timeout=10, metadata=bob).jobs) == []
    creds = grpc.ssl_channel_credentials(*((gm_tls / f).read_bytes() for f in ("ca.pem", "key.pem", "cert.pem")))
    lm = federation_pb2_grpc.LocalManagerServiceStub(grpc.secure_channel(f"127.0.0.1:{agent_port}", creds,
                                                                         options=TLS_OPTIONS))
    place = fpb.PlaceRequest(request_id="f0-999.0:0", gm=0, epoch=1, node=0, launch=fpb.LaunchHere(),
                             task=fpb.FedTask(task_id="f0-999.0", queue="a", req=fpb.Res(v=[250, 32]), spec=spec))
    alone = _refused(lambda: lm.Place(place, timeout=10))
    assert alone.code() == grpc.StatusCode.PERMISSION_DENIED and "names no user" in alone.details(), alone
    place.gm = 1
    assert "bound to GM index 0" in _refused(lambda: lm.Place(place, timeout=10)).details()


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
        _identity_checks(stub, data, tmp_path / "gm0-lm0", agent_port)

        assert _run("tcl-master", "gm", "revoke", "gm0", "--data-dir", str(data)).returncode == 0
        again = _run("tcl-master", "gm", "revoke", "gm0", "--data-dir", str(data))
        assert again.returncode == 1 and "holds no live certificate" in again.stderr, again.stderr
    finally:
        for p in reversed(procs):
            p.stop()
    assert leaked_cgroups(node) == []
