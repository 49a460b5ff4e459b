"""The README's promises on what other users see, through a live secure master on
127.0.0.1 (real TLS, real HTTP, the real `tcl` as a subprocess): a job's env values (and
its command, in a queue with `hide_command`) go only to its owner and admins; under
`--status-visibility own` no answer tells which job ids exist; the dashboard API answers
400 to a number it cannot take."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import grpc

from tcluster.master.identity.accounts import add_user
from tcluster.views.redaction import REDACTED
from tcluster.security.pki import load_master_pki
from tcluster.v1 import jobs_pb2
from tests.component.harness import Harness, run, wait_until
from tests.component.test_users_authz import auth, code_of, join_agent, spec, start_secure

SECRET = "alice-very-secret"
QUEUES = "queues:\n  default: {}\n  vault: {hide_command: true}\n"


async def users(h: Harness) -> dict[str, str]:
    data_dir = h.tmp / "master"
    return {"alice": add_user(data_dir, "alice", "nobody", ("*",), admin=False),
            "bob": add_user(data_dir, "bob", "nobody", (), admin=False),      # no grants at all
            "admin": add_user(data_dir, "boss", "nobody", ("*",), admin=True)}


SCRIPT = f"#!/bin/sh\nexport TOKEN={SECRET}\nsleep 100\n"      # a job script carries secrets as env does


def secret_spec(queue: str) -> jobs_pb2.JobSpec:
    msg = spec(queue)
    msg.env["AWS_SECRET_ACCESS_KEY"] = SECRET
    msg.script = SCRIPT
    return msg


async def tcl(h: Harness, token: str, *args: str) -> Any:
    """The real CLI, `-o json`, as a user: the master's answer as `tcl` prints it."""
    ca = h.tmp / "ca.pem"
    pki = load_master_pki(h.tmp / "master")
    assert pki is not None
    ca.write_bytes(pki.ca_pem)
    env = {**os.environ, "TCL_MASTER": h.address, "TCL_TOKEN": token, "TCL_CA": str(ca),
           "XDG_CONFIG_HOME": str(h.tmp / "config")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; from tcluster.cli.main import main; sys.exit(main())", *args,
        "-o", "json", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


async def http_json(base: str, path: str, token: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http:
        async with http.get(base + path, headers={"Authorization": f"Bearer {token}"}) as reply:
            return reply.status, await reply.json()


def test_env_values_and_hidden_commands_reach_only_the_owner_and_admins(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        (h.tmp / "queues.yaml").write_text(QUEUES)
        await start_secure(h, http="127.0.0.1:0", queues_file=h.tmp / "queues.yaml")
        t = await users(h)
        a = await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=secret_spec("default")), metadata=auth(t["alice"]))
        v = await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=secret_spec("vault")), metadata=auth(t["alice"]))
        assert h.master is not None
        base = f"http://127.0.0.1:{h.master.http_port}"
        for who, env_value, vault_command in (("bob", REDACTED, [REDACTED]),
                                              ("alice", SECRET, ["sleep", "100"]), ("admin", SECRET, ["sleep", "100"])):
            token = t[who]
            got = await h.jobs.Get(jobs_pb2.GetJobRequest(id=a.id), metadata=auth(token))
            assert dict(got.spec.env) == {"AWS_SECRET_ACCESS_KEY": env_value}, who
            assert got.spec.script == (SCRIPT if env_value == SECRET else REDACTED), who
            listed = {j.id: j for j in (await h.jobs.List(jobs_pb2.ListJobsRequest(), metadata=auth(token))).jobs}
            assert dict(listed[a.id].spec.env)["AWS_SECRET_ACCESS_KEY"] == env_value
            assert list(listed[v.id].spec.command) == vault_command
            assert list(listed[a.id].spec.command) == ["sleep", "100"]         # default: the command is shown
            status, docs = await http_json(base, "/api/v1/jobs?tasks=false", token)
            assert status == 200 and {d["id"]: d["env"] for d in docs}[a.id] == {"AWS_SECRET_ACCESS_KEY": env_value}
            status, doc = await http_json(base, f"/api/v1/jobs/{v.id}", token)
            assert status == 200 and doc["command"] == vault_command
            assert doc["env"] == {"AWS_SECRET_ACCESS_KEY": env_value}
            assert doc["script"] == (SCRIPT if env_value == SECRET else REDACTED)
        for who, env_value in (("bob", REDACTED), ("alice", SECRET)):       # the review's own commands
            shown = await tcl(h, t[who], "status", a.id)
            assert shown["env"] == {"AWS_SECRET_ACCESS_KEY": env_value} and shown["owner"] == "alice"
            assert shown["script"] == (SCRIPT if env_value == SECRET else REDACTED)
            listed = {d["id"]: d for d in await tcl(h, t[who], "jobs", "--all-users")}
            assert listed[a.id]["env"] == {"AWS_SECRET_ACCESS_KEY": env_value}
    run(scenario, tmp_path)


def test_visibility_own_hides_which_jobs_exist(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await start_secure(h, http="127.0.0.1:0", status_visibility="own")
        t = await users(h)
        await join_agent(h, "n1")
        a = await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec("default")), metadata=auth(t["alice"]))

        async def placed() -> bool:
            nodes = await h.cluster.ListNodes(jobs_pb2.ListNodesRequest(), metadata=auth(t["admin"]))
            return any(task.startswith(a.id) for n in nodes.nodes for task in n.tasks)
        await wait_until(placed)
        missing = "0123abcd"
        for job_id in (a.id, missing):      # bob gets the same answer for alice's job and for none
            want = (grpc.StatusCode.NOT_FOUND, f"job {job_id!r} not found")
            assert await code_of(h.jobs.Get(jobs_pb2.GetJobRequest(id=job_id), metadata=auth(t["bob"]))) == want
            assert await code_of(h.jobs.Cancel(jobs_pb2.CancelJobRequest(id=job_id), metadata=auth(t["bob"]))) == want
            assert await code_of(_drain(h.jobs.Logs(jobs_pb2.LogsRequest(job_id=job_id), metadata=auth(t["bob"])))) == want
        assert h.master is not None
        base = f"http://127.0.0.1:{h.master.http_port}"
        for job_id in (a.id, missing):
            for path in (f"/api/v1/jobs/{job_id}", f"/api/v1/jobs/{job_id}/usage", f"/api/v1/jobs/{job_id}/tasks/0/logs"):
                assert await http_json(base, path, t["bob"]) == (404, {"error": f"job {job_id!r} not found"})
        for who, sees in (("bob", False), ("alice", True), ("admin", True)):
            nodes = await h.cluster.ListNodes(jobs_pb2.ListNodesRequest(), metadata=auth(t[who]))
            assert any(task.startswith(a.id) for n in nodes.nodes for task in n.tasks) is sees, who
            status, docs = await http_json(base, "/api/v1/nodes", t[who])
            assert status == 200 and any(task.startswith(a.id) for d in docs for task in d["tasks"]) is sees, who
        for who, sees in (("bob", False), ("alice", True), ("admin", True)):   # a user's row under the leaf
            listed = await h.cluster.ListQueues(jobs_pb2.ListQueuesRequest(), metadata=auth(t[who]))
            assert ("alice" in {q.user for q in listed.queues}) is sees, who
            status, doc = await http_json(base, "/api/v1/queues", t[who])
            assert status == 200 and ("alice" in {q.get("user") for q in doc["queues"]}) is sees, who
        shown = await tcl(h, t["bob"], "nodes")                  # the review's `tcl nodes`, as bob
        assert [d["tasks"] for d in shown] == [[]]
        assert (await h.jobs.Get(jobs_pb2.GetJobRequest(id=a.id), metadata=auth(t["alice"]))).id == a.id
    run(scenario, tmp_path)


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


def test_the_dashboard_api_answers_400_to_numbers_it_cannot_take(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await start_secure(h, http="127.0.0.1:0")
        t = await users(h)
        a = await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec("default")), metadata=auth(t["alice"]))
        assert h.master is not None
        base = f"http://127.0.0.1:{h.master.http_port}"
        for path, name in ((f"/api/v1/jobs/{a.id}/tasks/0/logs?tail=1e400", "tail"),     # the review's HTTP 500
                           (f"/api/v1/jobs/{a.id}/tasks/0/logs?tail=-5", "tail"),
                           (f"/api/v1/jobs/{a.id}/tasks/{'9' * 5000}/logs", "index"),
                           ("/api/v1/jobs?limit=1e400", "limit"), ("/api/v1/jobs?limit=5000", "limit"),
                           ("/api/v1/cluster/usage?since=nan", "since"), ("/api/v1/queues/usage?until=inf", "until"),
                           (f"/api/v1/jobs/{a.id}/usage?tasks=0,1e400", "tasks"),
                           (f"/api/v1/jobs/{a.id}/usage?since=-1e400", "since"), ("/api/v1/jobs?state=done", "state")):
            status, doc = await http_json(base, path, t["alice"])
            assert status == 400 and doc["error"].startswith(f"{name}: "), (path, doc)
            assert " from " in doc["error"] or name == "state"      # the allowed range, for a number
        status, _ = await http_json(base, f"/api/v1/jobs/{a.id}/usage?tasks=0&since=1795341600", t["alice"])
        assert status == 200
    run(scenario, tmp_path)
