"""The secure multi-node flow through the real binaries: `tcl-master init`, three join
tokens, `tcl-agent join` on three nodes, agents started from their joined state (mutual
TLS), a job on real cgroup v1 containers, a reused token refused, and a revoked node cut off.

`tcl` speaks TLS only once the user side lands; until then the test reads the master with
a gRPC client that trusts the cluster CA, as `tcl` will."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from pathlib import Path

import grpc
import pytest

from tcluster.security.channel import TLS_OPTIONS
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc
from testkit.procs import BIN, Proc, cgroup_v1_usable, leaked_cgroups

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(cgroup_v1_usable() is not None, reason=str(cgroup_v1_usable()))]
WAIT_S = 60.0


def _run(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / args[0]), *args[1:]], capture_output=True, text=True, timeout=60, input=stdin,
                          env={**os.environ, **(env or {})})


# A node has the tcluster package only, without `cryptography` (packaging/build_deb.py): what a
# node runs here (the join, the agents, `tcl login`) runs with it unimportable.
_NO_CRYPTOGRAPHY = """import sys
class _Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("cryptography", "cffi"):
            raise ModuleNotFoundError(f"No module named {name!r} (a node has none)", name=name)
sys.meta_path.insert(0, _Blocked())
"""


def node_env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "node-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_NO_CRYPTOGRAPHY)
    return {"PYTHONPATH": str(site)}


def _until(check, what: str, timeout_s: float = WAIT_S):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s}s")


class Client:
    """What `tcl` will do: TLS with the cluster CA as the only root and the master's role name."""

    def __init__(self, address: str, ca_pem: bytes, token: str) -> None:
        creds = grpc.composite_channel_credentials(grpc.ssl_channel_credentials(ca_pem),
                                                   grpc.access_token_call_credentials(token))
        self.channel = grpc.secure_channel(address, creds, options=TLS_OPTIONS)
        self.jobs = jobs_pb2_grpc.JobServiceStub(self.channel)
        self.cluster = jobs_pb2_grpc.ClusterServiceStub(self.channel)

    def nodes(self) -> dict[str, jobs_pb2.Node]:
        return {n.name: n for n in self.cluster.ListNodes(jobs_pb2.ListNodesRequest(), timeout=10).nodes}

    def logs(self, job_id: str) -> bytes:
        return b"".join(c.data for c in self.jobs.Logs(jobs_pb2.LogsRequest(job_id=job_id), timeout=30))


def test_init_join_three_agents_run_a_job_and_revoke_one(tmp_path: Path) -> None:
    data = tmp_path / "master"
    init = _run("tcl-master", "init", "--data-dir", str(data))
    assert init.returncode == 0 and "CA fingerprint: sha256:" in init.stdout, init.stderr
    again = _run("tcl-master", "init", "--data-dir", str(data))
    assert again.returncode == 1 and "already exists: this master is initialised" in again.stderr
    master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(data),
                   "--heartbeat-interval-s", "0.5", "--http", "off"], tmp_path / "master.log")
    nodes = [f"e2e-sec{i}-{os.getpid()}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    node = node_env(tmp_path)
    agents: list[Proc] = []
    try:
        port, agent_port = master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+) \(TLS\), agents on port (\d+)").groups()
        address = f"127.0.0.1:{port}"
        tokens = [json.loads(_run("tcl-master", "join-token", "create", "--data-dir", str(data), "-o", "json",
                                  "--labels", f"slot=s{i}").stdout)["token"] for i in range(3)]
        for name, token in zip(nodes, tokens):   # the token on stdin: in no argv (install.sh's way)
            joined = _run("tcl-agent", "join", "--master", address, "--token-file", "-", "--node", name,
                          "--state-dir", str(tmp_path / name), stdin=token + "\n", env=node)
            assert joined.returncode == 0, joined.stderr
            assert f"127.0.0.1:{agent_port} with mutual TLS" in joined.stdout
        reused = _run("tcl-agent", "join", "--master", address, "--token", tokens[0], "--node", "late",
                      "--state-dir", str(tmp_path / "late"))
        assert reused.returncode == 1 and "was already used" in reused.stderr
        assert not (tmp_path / "late" / "joined.json").exists()
        for name in nodes:   # the unit's way: no --master, no --node, no token
            agents.append(Proc([str(BIN / "tcl-agent"), "--state-dir", str(tmp_path / name), "--runtime", "cgroup1"],
                               tmp_path / f"{name}.log", env=node))
        for agent in agents:
            agent.wait_for_output(r"registered with 127\.0\.0\.1:" + agent_port)
        admin = re.search(r"^\s+(tcu\.\S+)$", init.stdout, re.M)     # the first admin's token
        assert admin is not None, init.stdout
        client = Client(address, (data / "pki" / "ca.crt").read_bytes(), admin.group(1))
        seen = _until(lambda: (lambda n: n if all(n.get(x) and n[x].state == "READY" for x in nodes) else None)(
            client.nodes()), "three READY nodes")
        assert [dict(seen[x].labels)["slot"] for x in nodes] == ["s0", "s1", "s2"]
        # tcl on a node: the CA the token pins, fetched and checked without cryptography
        user = {**node, "XDG_CONFIG_HOME": str(tmp_path / "user")}
        login = _run("tcl", "login", "--master", address, stdin=admin.group(1) + "\n", env=user)
        assert login.returncode == 0 and "logged in" in login.stderr, login.stderr
        assert set(json.loads(_run("tcl", "nodes", "-o", "json", env=user).stdout)[0]) >= {"name", "state"}

        spec = jobs_pb2.JobSpec(command=["sh", "-c", "id -u"], tasks=1, constraints=["slot=s1"])
        spec.resources.cpu, spec.resources.memory = 0.5, 128 * 2**20
        job_id = client.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec), timeout=10).id
        job = _until(lambda: (lambda j: j if j.state == jobs_pb2.JOB_SUCCEEDED else None)(
            client.jobs.Get(jobs_pb2.GetJobRequest(id=job_id), timeout=10)), "the job succeeds")
        assert job.tasks[0].node == nodes[1]
        assert client.logs(job_id) == b"65534\n"      # the agent's default user, nobody

        revoked = _run("tcl-master", "node", "revoke", nodes[2], "--data-dir", str(data))
        assert revoked.returncode == 0, revoked.stderr
        _until(lambda: client.nodes()[nodes[2]].state == "DOWN", "the revoked node is cut off")
        agents[2].wait_for_output(r"master refused this agent: .*revoked")
        assert client.nodes()[nodes[0]].state == "READY"
        client.channel.close()
    finally:
        for agent in agents:
            agent.stop()
        master.stop()
    assert [leaked_cgroups(n) for n in nodes] == [[], [], []]
