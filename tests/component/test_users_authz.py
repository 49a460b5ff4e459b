"""Users, tokens and authorization through the real gRPC servicers on 127.0.0.1."""

from __future__ import annotations

import logging
from pathlib import Path

import asyncio
import time

import grpc
import pytest

from tcluster.agent.daemon import Agent
from tcluster.agent.joinclient import join
from tcluster.agent.joinstate import load_joined
from tcluster.security.channel import TLS_OPTIONS
from testkit.fake_runtime import FakeRuntime
from tcluster.agent.settings import AgentSettings
from tcluster.master.identity.nodeauth import NodeAuth
from tcluster.master.identity.accounts import add_user, bootstrap_admin
from tcluster.security.jointoken import JoinTokenText
from tcluster.security.pki import init_pki
from tcluster.v1 import jobs_pb2
from tests.component.harness import WAIT_S, Harness, RunningAgent, run

QUEUES = """
queues:
  ads: {queues: {prod: {max_job_weight: 4}, test: {}}}
  eng: {queues: {ml: {}}}
"""


def spec(queue: str = "ads.prod", user: str = "", weight: float = 0) -> jobs_pb2.JobSpec:
    msg = jobs_pb2.JobSpec(command=["sleep", "100"], queue=queue, user=user, weight=weight)
    msg.resources.cpu, msg.resources.memory = 0.5, 2**20
    return msg


def auth(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def start_secure(h: Harness, **overrides: object) -> None:
    """The master with TLS material (real TLS on 127.0.0.1); the harness's client channel
    becomes TLS with the cluster CA as its only root."""
    pki = init_pki(h.tmp / "master", [])
    await h.start_master(**overrides)
    assert h.master is not None and h.master.secure and h.channel is not None
    await h.channel.close()
    h.channel = grpc.aio.secure_channel(h.address, grpc.ssl_channel_credentials(pki.ca_pem), options=TLS_OPTIONS)


async def join_agent(h: Harness, node: str) -> None:
    """An agent that joined with a join token and talks mutual TLS to the agent port."""
    auth = NodeAuth(h.tmp / "master")
    try:
        token_id, secret = auth.create_token(3600, {}, time.time())
    finally:
        auth.close()
    fingerprint = init_fingerprint(h)
    state_dir = h.tmp / "agents" / node
    await join(h.address, str(JoinTokenText(fingerprint, token_id, secret)), node, state_dir)
    loaded = load_joined(state_dir)
    assert loaded is not None
    settings = AgentSettings(master=loaded[0].agent_address, node=node, cpus=4, memory_bytes=8 * 2**30,
                             state_dir=state_dir, tls_dir=state_dir / "pki", heartbeat_interval_s=0.2,
                             reconnect_max_s=0.5, kill_grace_s=0.5)
    runtime = FakeRuntime()
    agent = Agent(settings, runtime)
    h.agents[node] = RunningAgent(agent, runtime, asyncio.create_task(agent.run()))
    await asyncio.wait_for(agent.registered.wait(), WAIT_S)


def init_fingerprint(h: Harness) -> str:
    from tcluster.security.pki import load_master_pki
    pki = load_master_pki(h.tmp / "master")
    assert pki is not None
    return pki.fingerprint


async def secure_master(h: Harness) -> dict[str, str]:
    data_dir = h.tmp / "master"
    queues = h.tmp / "queues.yaml"
    queues.write_text(QUEUES)
    await start_secure(h, queues_file=queues)
    tokens = {"admin": bootstrap_admin(data_dir),       # added while the master runs: work at once
              "alice": add_user(data_dir, "alice", "nobody", ("ads.*",), admin=False),
              "bob": add_user(data_dir, "bob", "nobody", ("eng",), admin=False)}
    await join_agent(h, "n1")
    return tokens


async def code_of(call: object) -> tuple[grpc.StatusCode, str]:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        return error.code(), error.details() or ""
    raise AssertionError("the call was allowed")


def test_refusals_and_what_each_role_may_do(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    issued: list[str] = []

    async def scenario(h: Harness) -> None:
        t = await secure_master(h)
        issued.extend(t.values())
        jobs = h.jobs
        # no token, a malformed one, an unknown one
        assert (await code_of(jobs.Submit(jobs_pb2.SubmitRequest(spec=spec()))))[0] == grpc.StatusCode.UNAUTHENTICATED
        code, why = await code_of(jobs.Submit(jobs_pb2.SubmitRequest(spec=spec()), metadata=auth("nonsense")))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "nonsense" not in why
        forged = t["alice"][:-4] + "AAAA"
        code, why = await code_of(jobs.List(jobs_pb2.ListJobsRequest(), metadata=auth(forged)))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "not known to this master" in why
        # alice submits to her queue; bob's job is in his
        a = await jobs.Submit(jobs_pb2.SubmitRequest(spec=spec("ads.prod", weight=4)), metadata=auth(t["alice"]))
        b = await jobs.Submit(jobs_pb2.SubmitRequest(spec=spec("eng.ml")), metadata=auth(t["bob"]))
        assert (a.spec.owner, a.spec.user, b.spec.owner) == ("alice", "nobody", "bob")
        # outside her grants, another user's identity, above the queue's weight cap
        code, why = await code_of(jobs.Submit(jobs_pb2.SubmitRequest(spec=spec("eng.ml")), metadata=auth(t["alice"])))
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert why == "user alice may not submit to queue eng.ml: their grants are ads.*"
        for user in ("root", "daemon"):
            code, why = await code_of(jobs.Submit(jobs_pb2.SubmitRequest(spec=spec(user=user)), metadata=auth(t["alice"])))
            assert code == grpc.StatusCode.PERMISSION_DENIED and "only admins may choose --user" in why
        code, why = await code_of(jobs.Submit(jobs_pb2.SubmitRequest(spec=spec("ads.test", weight=2)),
                                              metadata=auth(t["alice"])))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "its max_job_weight is 1" in why
        # bob may read alice's job's status, not its logs, and may not cancel it
        assert (await jobs.Get(jobs_pb2.GetJobRequest(id=a.id), metadata=auth(t["bob"]))).spec.owner == "alice"
        code, why = await code_of(jobs.Cancel(jobs_pb2.CancelJobRequest(id=a.id), metadata=auth(t["bob"])))
        assert (code, why) == (grpc.StatusCode.PERMISSION_DENIED, f"user bob may not cancel job {a.id}: it belongs to alice")
        code, why = await code_of(_drain(jobs.Logs(jobs_pb2.LogsRequest(job_id=a.id), metadata=auth(t["bob"]))))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "may not read the logs" in why
        # the owner may; an admin may do everything, --user included
        await jobs.Cancel(jobs_pb2.CancelJobRequest(id=a.id), metadata=auth(t["alice"]))
        await jobs.Cancel(jobs_pb2.CancelJobRequest(id=b.id), metadata=auth(t["admin"]))
        root = await jobs.Submit(jobs_pb2.SubmitRequest(spec=spec("eng.ml", user="daemon", weight=9)),
                                 metadata=auth(t["admin"]))
        assert (root.spec.owner, root.spec.user) == ("admin", "daemon")
        # a filter by owner; a user added while the master runs works at once
        mine = await jobs.List(jobs_pb2.ListJobsRequest(owner="alice"), metadata=auth(t["bob"]))
        assert [j.id for j in mine.jobs] == [a.id]
        carol = add_user(h.tmp / "master", "carol", "nobody", ("ads.test",), admin=False)
        who = await h.cluster.WhoAmI(jobs_pb2.WhoAmIRequest(), metadata=auth(carol))
        assert (who.name, who.admin, list(who.queues), who.secure) == ("carol", False, ["ads.test"], True)

    with caplog.at_level(logging.INFO, logger="tcluster.audit"):
        run(scenario, tmp_path)
    audit = [r.getMessage() for r in caplog.records if r.name == "tcluster.audit"]
    assert any(line.startswith("DENIED user 'bob' CancelJob") for line in audit)
    assert any(line.startswith("allowed admin 'admin' SubmitJob") for line in audit)
    assert any("DENIED unauthenticated" in line and "no token" in line for line in audit)
    assert issued and not any(token.split(".")[-1] in line for line in audit for token in issued)   # never a token


async def _drain(stream: object) -> None:
    async for _ in stream:  # type: ignore[attr-defined]
        pass


def test_status_visibility_own(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        data_dir = h.tmp / "master"
        await start_secure(h, status_visibility="own")
        alice = add_user(data_dir, "alice", "nobody", ("*",), admin=False)
        bob = add_user(data_dir, "bob", "nobody", ("*",), admin=False)
        await join_agent(h, "n1")
        a = await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec("default")), metadata=auth(alice))
        code, why = await code_of(h.jobs.Get(jobs_pb2.GetJobRequest(id=a.id), metadata=auth(bob)))
        assert (code, why) == (grpc.StatusCode.NOT_FOUND, f"job {a.id!r} not found")   # as for no such job
        assert len((await h.jobs.List(jobs_pb2.ListJobsRequest(), metadata=auth(bob))).jobs) == 0
        assert len((await h.jobs.List(jobs_pb2.ListJobsRequest(), metadata=auth(alice))).jobs) == 1
        # A dependency must not tell bob whether alice's job exists (issue 36 #7): as for none.
        waits, none = spec("default"), spec("default")
        waits.dependency, none.dependency = f"afterok:{a.id}", "afterok:ffff0000"
        told = await code_of(h.jobs.Submit(jobs_pb2.SubmitRequest(spec=waits), metadata=auth(bob)))
        unknown = await code_of(h.jobs.Submit(jobs_pb2.SubmitRequest(spec=none), metadata=auth(bob)))
        assert told[0] == unknown[0] == grpc.StatusCode.INVALID_ARGUMENT
        assert told[1] == unknown[1].replace("ffff0000", a.id) and "not found" in told[1]
        mine = await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=waits), metadata=auth(alice))    # her own: fine
        assert mine.spec.dependency == f"afterok:{a.id}"
    run(scenario, tmp_path)


def test_a_master_without_tls_material_treats_everyone_as_admin(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        job = await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec("default", user="daemon", weight=3)))
        assert (job.spec.owner, job.spec.user) == ("anonymous", "daemon")
        who = await h.cluster.WhoAmI(jobs_pb2.WhoAmIRequest())
        assert (who.name, who.admin, who.secure) == ("anonymous", True, False)
    run(scenario, tmp_path)


def test_the_dashboard_needs_a_login_and_serves_logs_only_to_their_owner(tmp_path: Path) -> None:
    import aiohttp

    async def scenario(h: Harness) -> None:
        await start_secure(h, http="127.0.0.1:0")
        alice = add_user(h.tmp / "master", "alice", "nobody", ("*",), admin=False)
        bob = add_user(h.tmp / "master", "bob", "nobody", ("*",), admin=False)
        await join_agent(h, "n1")
        job = await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec("default")), metadata=auth(alice))
        assert h.master is not None
        base = f"http://127.0.0.1:{h.master.http_port}"
        url = f"{base}/api/v1/jobs/{job.id}/tasks/0/logs"
        async with aiohttp.ClientSession() as http:
            for path in (url, f"{base}/api/v1/jobs/{job.id}", f"{base}/api/v1/overview", f"{base}/metrics"):
                async with http.get(path) as reply:          # no token, no session: log in first
                    assert reply.status == 401 and "log in" in (await reply.json())["error"]
            async with http.get(f"{base}/") as reply:        # the page itself loads, to show the form
                assert reply.status == 200
            for probe, says in (("/healthz", "ok"), ("/readyz", "ok: leading, 1 of 1 nodes ready")):
                async with http.get(base + probe) as reply:     # probes carry no token (issue 37)
                    assert reply.status == 200 and (await reply.text()).strip() == says
                async with http.get(base + probe, headers={"Authorization": "Bearer tcu..forged"}) as reply:
                    assert reply.status == 200                   # nor is a stray one checked
            async with http.get(url, headers={"Authorization": f"Bearer {bob}"}) as reply:
                assert reply.status == 403 and "it belongs to alice" in (await reply.json())["error"]
            async with http.get(url, headers={"Authorization": "Bearer tcu..forged"}) as reply:
                assert reply.status == 401
            async with http.get(url, headers={"Authorization": f"Bearer {alice}"}) as reply:
                assert reply.status not in (401, 403)        # past the check (the fake runtime has no files)
            async with http.get(f"{base}/api/v1/jobs/{job.id}", headers={"Authorization": f"Bearer {bob}"}) as reply:
                assert reply.status == 200                   # status visibility `all`: every user reads status
                assert (await reply.json())["owner"] == "alice"
            for owner, ids in (("alice", [job.id]), ("bob", [])):
                async with http.get(f"{base}/api/v1/jobs?owner={owner}",
                                    headers={"Authorization": f"Bearer {bob}"}) as reply:
                    assert [j["id"] for j in await reply.json()] == ids
    run(scenario, tmp_path)


def test_dashboard_login_sets_a_session_that_logout_and_user_removal_end(tmp_path: Path) -> None:
    import aiohttp

    from tcluster.master.identity.accounts import remove_user
    from tcluster.master.web.session import COOKIE

    async def scenario(h: Harness) -> None:
        await start_secure(h, http="127.0.0.1:0")
        alice = add_user(h.tmp / "master", "alice", "nobody", ("*",), admin=False)
        assert h.master is not None
        base = f"http://127.0.0.1:{h.master.http_port}"
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:  # unsafe: an IP host
            async with http.post(f"{base}/api/v1/login", json={"token": "tcu..forged"}) as reply:
                assert reply.status == 401
            async with http.post(f"{base}/api/v1/login", data=b"x" * 100) as reply:
                assert reply.status == 400 and len(await reply.text()) < 300     # never echoed back
            async with http.post(f"{base}/api/v1/login", json={"token": alice}) as reply:
                assert reply.status == 200 and (await reply.json())["user"] == "alice"
                cookie = reply.cookies[COOKIE]
                assert cookie["httponly"] and cookie["samesite"] == "Strict" and alice not in cookie.value
            async with http.get(f"{base}/api/v1/whoami") as reply:     # the cookie jar sends the session
                assert (await reply.json()) == {"user": "alice", "role": "user", "secure": True}
            async with http.get(f"{base}/api/v1/overview") as reply:
                assert reply.status == 200
            async with http.post(f"{base}/api/v1/logout") as reply:
                assert reply.status == 200
            async with http.get(f"{base}/api/v1/overview") as reply:
                assert reply.status == 401
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:  # unsafe: an IP host
            async with http.post(f"{base}/api/v1/login", json={"token": alice}) as reply:
                assert reply.status == 200
            assert remove_user(h.tmp / "master", "alice")
            async with http.get(f"{base}/api/v1/overview") as reply:   # a removed user's session is dead at once
                assert reply.status == 401
    run(scenario, tmp_path)


def test_dashboard_status_visibility_own(tmp_path: Path) -> None:
    import aiohttp

    async def scenario(h: Harness) -> None:
        await start_secure(h, http="127.0.0.1:0", status_visibility="own")
        alice = add_user(h.tmp / "master", "alice", "nobody", ("*",), admin=False)
        bob = add_user(h.tmp / "master", "bob", "nobody", ("*",), admin=False)
        admin = add_user(h.tmp / "master", "root-admin", "nobody", ("*",), admin=True)
        await join_agent(h, "n1")
        job = await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec("default")), metadata=auth(alice))
        assert h.master is not None
        base = f"http://127.0.0.1:{h.master.http_port}"
        as_bob, as_alice = {"Authorization": f"Bearer {bob}"}, {"Authorization": f"Bearer {alice}"}
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/api/v1/jobs", headers=as_bob) as reply:
                assert await reply.json() == []
            async with http.get(f"{base}/api/v1/jobs", headers=as_alice) as reply:
                assert [j["id"] for j in await reply.json()] == [job.id]
            for path in (f"/api/v1/jobs/{job.id}", f"/api/v1/jobs/{job.id}/usage"):
                async with http.get(base + path, headers=as_bob) as reply:
                    assert reply.status == 404 and "not found" in (await reply.json())["error"]   # as no such job
            async with http.get(f"{base}/metrics", headers=as_bob) as reply:
                assert reply.status == 403 and "admin" in (await reply.json())["error"]
            async with http.get(f"{base}/metrics", headers={"Authorization": f"Bearer {admin}"}) as reply:
                assert reply.status == 200 and "tcluster_" in await reply.text()
    run(scenario, tmp_path)
