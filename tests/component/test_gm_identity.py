"""One identity from user to task (issue 35), in process: a secure LM and a GM with its
certificate. Without a token the GM refuses; a user without a grant on the queue is refused;
another user can neither read, list nor cancel alice's job, an admin can; the LM job runs as
alice's Unix mapping; a GM certificate alone cannot Place (no user) nor act as another index;
owners and tokens survive a GM restart (a task placed after it runs as alice's mapping)."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

import grpc
import pytest

from tests.component.harness import Harness, run, wait_until
from tests.component.secure import SecureCluster
from tcluster.gm.daemon import GMDaemon
from tcluster.gm.settings import GMSettings, settings_from
from tcluster.master.app.main import main as master_main
from tcluster.master.identity.accounts import add_user
from tcluster.security.channel import TLS_OPTIONS
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2

Meta = tuple[tuple[str, str], ...]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as(data_dir: Path, name: str, unix_user: str, grants: tuple[str, ...], admin: bool = False) -> Meta:
    return (("authorization", f"Bearer {add_user(data_dir, name, unix_user, grants, admin=admin)}"),)


async def _code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call  # type: ignore[misc]
    return err.value.code()


SPEC = jobs_pb2.JobSpec(queue="a", tasks=1, command=["sleep"], resources=common_pb2.Resources(cpu=1, memory=2**28))


async def _gm_checks(stub: federation_pb2_grpc.GlobalManagerServiceStub, alice: Meta, bob: Meta, carol: Meta,
                     admin: Meta) -> str:
    assert await _code(stub.Submit(fpb.FedSubmitRequest(spec=SPEC), timeout=10)) == grpc.StatusCode.UNAUTHENTICATED
    assert await _code(stub.Status(fpb.FedStatusRequest(), timeout=10)) == grpc.StatusCode.UNAUTHENTICATED
    assert (await stub.Status(fpb.FedStatusRequest(), timeout=10, metadata=alice)).gm == "gm0"
    bad = (("authorization", "Bearer tcl_not-a-token"),)
    assert await _code(stub.Submit(fpb.FedSubmitRequest(spec=SPEC), timeout=10, metadata=bad)) in (
        grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT)
    assert await _code(stub.Submit(fpb.FedSubmitRequest(spec=SPEC), timeout=10, metadata=carol)) == \
        grpc.StatusCode.PERMISSION_DENIED                          # no grant on queue a
    as_root = jobs_pb2.JobSpec(user="root")
    as_root.MergeFrom(SPEC)
    assert await _code(stub.Submit(fpb.FedSubmitRequest(spec=as_root), timeout=10, metadata=alice)) == \
        grpc.StatusCode.PERMISSION_DENIED                          # only admins choose --user
    job = await stub.Submit(fpb.FedSubmitRequest(spec=SPEC), timeout=10, metadata=alice)
    assert job.owner == "alice"
    assert await _code(stub.Get(fpb.FedGetRequest(id=job.id), timeout=10, metadata=bob)) == \
        grpc.StatusCode.PERMISSION_DENIED
    assert await _code(stub.Cancel(fpb.FedCancelRequest(id=job.id), timeout=10, metadata=bob)) == \
        grpc.StatusCode.PERMISSION_DENIED
    assert [j.id for j in (await stub.List(fpb.FedListRequest(), timeout=10, metadata=bob)).jobs] == []
    assert [j.id for j in (await stub.List(fpb.FedListRequest(), timeout=10, metadata=alice)).jobs] == [job.id]
    assert [j.id for j in (await stub.List(fpb.FedListRequest(), timeout=10, metadata=admin)).jobs] == [job.id]
    assert (await stub.Get(fpb.FedGetRequest(id=job.id), timeout=10, metadata=admin)).owner == "alice"
    return job.id


async def _lm_checks(c: SecureCluster, tls: Path) -> None:
    """The GM's own certificate, used directly: no user, no other index."""
    creds = grpc.ssl_channel_credentials((tls / "ca.pem").read_bytes(), (tls / "key.pem").read_bytes(),
                                         (tls / "cert.pem").read_bytes())
    async with grpc.aio.secure_channel(c.agent_address, creds, options=TLS_OPTIONS) as ch:
        lm = federation_pb2_grpc.LocalManagerServiceStub(ch)
        place = fpb.PlaceRequest(request_id="f0-99.0:0", gm=0, epoch=1, node=0, launch=fpb.LaunchHere(),
                                 task=fpb.FedTask(task_id="f0-99.0", queue="a", req=fpb.Res(v=[1000, 256]),
                                                  spec=SPEC))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await lm.Place(place, timeout=10)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "names no user" in err.value.details()
        place.gm = 1
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await lm.Place(place, timeout=10)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "bound to GM index 0" in err.value.details()


def test_one_identity_from_the_gm_caller_to_the_lm_task(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        c = await SecureCluster.start(h, federation_lm_id=0, federation_gms=1, federation_state_interval_s=0.3,
                                      status_visibility="own")
        await c.join("n1")
        await c.start_agent("n1")
        data = h.tmp / "master"
        tls = tmp_path / "gm0-tls"
        assert master_main(["gm", "issue", "gm0", "--index", "0", "--out", str(tls), "--data-dir", str(data)]) == 0
        grants = ("a", "default")      # the GM checks queue a; the LM its leaf that runs it (default)
        alice, bob = _as(data, "alice", "nobody", grants), _as(data, "bob", "daemon", grants)
        carol, admin = _as(data, "carol", "", ("b",)), _as(data, "root2", "", ("*",), admin=True)
        port = _free_port()
        settings = settings_from(dict(name="gm0", index=0, listen=f"127.0.0.1:{port}", state_dir=str(tmp_path / "gm"),
                                      lms=f"lm0={c.agent_address}", lm_tls=f"lm0={tls}", queue_map="a=gm0"))
        gm = GMDaemon(settings)
        await gm.start()
        try:
            stub = federation_pb2_grpc.GlobalManagerServiceStub(gm.channel(f"127.0.0.1:{port}"))
            job_id = await _gm_checks(stub, alice, bob, carol, admin)

            async def running() -> bool:
                return [t.state for t in (await stub.Get(fpb.FedGetRequest(id=job_id), timeout=10,
                                                         metadata=alice)).tasks] == ["RUNNING"]
            await wait_until(running)
            lm_job = (await stub.Get(fpb.FedGetRequest(id=job_id), timeout=10, metadata=alice)).tasks[0].job_id
            assert h.master is not None
            assert h.master.service.get(lm_job)[0].spec.user == "nobody"     # run_as on the LM
            _seen_at_the_lm_as_alices(h, lm_job)
            await _lm_checks(c, tls)
            mode = stat.S_IMODE((tmp_path / "gm" / "gm.sqlite").stat().st_mode)
            assert mode == 0o600 and stat.S_IMODE((tmp_path / "gm").stat().st_mode) == 0o700
            four = jobs_pb2.JobSpec()
            four.CopyFrom(SPEC)
            four.tasks = 4                  # 3 fit beside the first job's task (n1 has 4 cpus), 1 waits
            second = (await stub.Submit(fpb.FedSubmitRequest(spec=four), timeout=10, metadata=alice)).id

            async def three_run() -> bool:
                got = await stub.Get(fpb.FedGetRequest(id=second), timeout=10, metadata=alice)
                return sorted(t.state for t in got.tasks) == ["PENDING", "RUNNING", "RUNNING", "RUNNING"]
            await wait_until(three_run)
        finally:
            await gm.stop()
        await _after_a_restart(h, settings, alice, bob, job_id, second)
    run(scenario, tmp_path)


def _seen_at_the_lm_as_alices(h: Harness, lm_job: str) -> None:
    """Through the LM's own API (`tcl status`, `tcl list` there) under --status-visibility own:
    alice reads and lists the LM job that runs her task, with her env; bob does not see it."""
    from tcluster.domain.errors import NotFound
    from tcluster.security.authz import Caller
    assert h.master is not None
    service = h.master.service
    alice, bob = Caller("alice", False, "nobody", ("a",)), Caller("bob", False, "daemon", ("a",))
    assert service.read(lm_job, alice)[0].id == lm_job
    with pytest.raises(NotFound):
        service.read(lm_job, bob)
    listed = [job.id for job, _ in service.list_jobs(set(), "", 0, caller=alice)[0]]
    assert lm_job in listed
    assert lm_job not in [job.id for job, _ in service.list_jobs(set(), "", 0, caller=bob)[0]]


async def _after_a_restart(h: Harness, settings: GMSettings, alice: Meta, bob: Meta, first: str, second: str) -> None:
    """Owners and tokens are durable: a restarted GM still refuses bob, and places alice's
    waiting task with her token, so it too runs as her mapping."""
    gm = GMDaemon(settings)
    await gm.start()
    try:
        stub = federation_pb2_grpc.GlobalManagerServiceStub(gm.channel(settings.listen))
        assert await _code(stub.Get(fpb.FedGetRequest(id=second), timeout=10, metadata=bob)) == \
            grpc.StatusCode.PERMISSION_DENIED
        await stub.Cancel(fpb.FedCancelRequest(id=first), timeout=10, metadata=alice)      # room for the 4th

        async def four_run() -> bool:
            got = await stub.Get(fpb.FedGetRequest(id=second), timeout=10, metadata=alice)
            return [t.state for t in got.tasks] == ["RUNNING"] * 4
        await wait_until(four_run, 20)
        got = await stub.Get(fpb.FedGetRequest(id=second), timeout=10, metadata=alice)
        assert h.master is not None
        assert {h.master.service.get(t.job_id)[0].spec.user for t in got.tasks} == {"nobody"}
        await stub.Cancel(fpb.FedCancelRequest(id=second), timeout=10, metadata=alice)
    finally:
        await gm.stop()
