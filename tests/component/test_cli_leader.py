"""`tcl --master a,b` against real in-process gRPC servers: a standby (master/store/standby.py
with a fake LeaderView) sends the CLI on to the leader (the real master of the harness);
an address that refuses connections is passed over."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Awaitable, Callable, Iterator

import grpc
import pytest

from tcluster.cli import leader
from tcluster.cli.main import main as tcl
from tcluster.master.store.standby import LeaderInfo, StandbyInterceptor
from tcluster.v1 import jobs_pb2, jobs_pb2_grpc
from tests.component.harness import Harness, run
from testkit.procs import closed_port


class View:
    def __init__(self, leader: LeaderInfo | None) -> None:
        self.info = leader

    def leading(self) -> bool:
        return False

    def leader(self) -> LeaderInfo | None:
        return self.info

    def why_no_leader(self) -> str:
        return "election in progress"


async def start_standby(leader: str) -> tuple[grpc.aio.Server, str]:
    """A master that does not lead: every call ends in the interceptor."""
    info = LeaderInfo("m1", leader, leader, "") if leader else None
    server = grpc.aio.server(interceptors=[StandbyInterceptor(View(info), "client")])
    jobs_pb2_grpc.add_JobServiceServicer_to_server(jobs_pb2_grpc.JobServiceServicer(), server)
    jobs_pb2_grpc.add_ClusterServiceServicer_to_server(jobs_pb2_grpc.ClusterServiceServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture(autouse=True)
def _fresh_process() -> Iterator[None]:
    """Each test starts from the master lists alone, with no leader remembered from another."""
    leader._last_leader.clear()
    yield
    leader._last_leader.clear()


def with_standby(scenario: Callable[[Harness, str], Awaitable[None]], tmp: Path, hint: bool = True) -> None:
    async def both(h: Harness) -> None:
        await h.start_master()
        server, standby = await start_standby(h.address if hint else "")
        try:
            await scenario(h, standby)
        finally:
            await server.stop(0)
    run(both, tmp)


def test_the_standby_sends_tcl_to_the_leader(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario(h: Harness, standby: str) -> None:
        await h.submit(["true"])
        # The standby alone is named: its hint leads off the list, to the leader.
        assert await asyncio.to_thread(tcl, ["--master", standby, "jobs", "-o", "json"]) == 0
        (job,) = json.loads(capsys.readouterr().out)
        assert await asyncio.to_thread(tcl, ["--master", f"{standby},{h.address}", "status", job["id"]]) == 0
        assert job["id"] in capsys.readouterr().out
        # A stream opens at the leader too: its answer (no such job) is the leader's, not the standby's.
        assert await asyncio.to_thread(tcl, ["--master", standby, "logs", "nope"]) == 1
        err = capsys.readouterr().err
        assert "nope" in err and "standby" not in err
    with_standby(scenario, tmp_path)


def test_an_address_that_refuses_connections_is_passed_over(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        masters = f"{closed_port()},{h.address}"
        assert await asyncio.to_thread(tcl, ["--master", masters, "nodes", "-o", "json"]) == 0
        assert json.loads(capsys.readouterr().out) == []
        assert await asyncio.to_thread(tcl, ["--master", masters, "whoami"]) == 0
        assert f"on {h.address}:" in capsys.readouterr().out
    run(scenario, tmp_path)


def test_no_leader_anywhere_exits_1_naming_each_master(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario(h: Harness, standby: str) -> None:
        down = closed_port()
        code = await asyncio.to_thread(tcl, ["--master", f"{standby},{down}", "--wait-leader-s", "0.3", "jobs"])
        err = capsys.readouterr().err
        assert code == 1 and err.startswith("error: no master leads (waited 0.3s for one): ")
        assert f"{standby}: this master is a standby; no master leads yet (election in progress)" in err
        assert f"{down}: cannot be reached" in err
    with_standby(scenario, tmp_path, hint=False)


class ReplyLosingMaster(jobs_pb2_grpc.JobServiceServicer):
    """In front of the real master: forwards each Submit, then loses the reply of the first
    `lose` of them (as a leader that dies or hangs after its write, before it answers)."""

    def __init__(self, master: str, lose: int) -> None:
        self.stub = jobs_pb2_grpc.JobServiceStub(grpc.aio.insecure_channel(master))
        self.lose = lose
        self.request_ids: list[str] = []
        self.after_loss: Callable[[], object] = lambda: None

    async def Submit(self, request: jobs_pb2.SubmitRequest, context: grpc.aio.ServicerContext) -> jobs_pb2.Job:
        job = await self.stub.Submit(request)
        self.request_ids.append(request.spec.request_id)
        if len(self.request_ids) <= self.lose:
            self.after_loss()
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the master went away before it answered")
        return job


async def start_losing(master: str, lose: int) -> tuple[grpc.aio.Server, str, ReplyLosingMaster]:
    server = grpc.aio.server()
    proxy = ReplyLosingMaster(master, lose)
    jobs_pb2_grpc.add_JobServiceServicer_to_server(proxy, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}", proxy


def test_tcl_submit_sends_again_after_a_lost_reply_and_makes_one_job(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Proves: when the master made the job but its reply was lost, `tcl submit` sends the
    same request id again and prints the job the first send made; when every reply is
    lost, it exits 1 saying how to finish it at most once (`--request-id`), and that
    command returns the same job instead of a second."""
    async def scenario(h: Harness) -> None:
        await h.start_master()
        server, flaky, proxy = await start_losing(h.address, lose=2)
        try:
            assert await asyncio.to_thread(tcl, ["--master", flaky, "submit", "--", "sleep", "1"]) == 0
            out, err = capsys.readouterr()
            assert len(proxy.request_ids) == 3 and len(set(proxy.request_ids)) == 1
            assert "sending it again with request id" in err and err.count("sending it again") == 1
            listed = await h.jobs.List(jobs_pb2.ListJobsRequest(all=True))
            assert [j.id for j in listed.jobs] == [out.strip()]
            proxy.lose = 100
            code = await asyncio.to_thread(tcl, ["--master", flaky, "--wait-leader-s", "0.5", "submit", "--", "true"])
            err = capsys.readouterr().err
            assert code == 1 and "the master went away before it answered" in err
            request_id = err.split("--request-id ")[1].split()[0]
            assert await asyncio.to_thread(tcl, ["--master", h.address, "submit", "--request-id", request_id,
                                                 "--", "true"]) == 0
            made = capsys.readouterr().out.strip()
            listed = await h.jobs.List(jobs_pb2.ListJobsRequest(all=True))
            assert len(listed.jobs) == 2 and made in {j.id for j in listed.jobs}
        finally:
            await server.stop(0)
    run(scenario, tmp_path)


def test_a_lone_master_gone_after_a_lost_reply_still_gets_the_request_id_hint(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Proves: a master that wrote the job and went away before answering (its port then
    refuses connections) leaves the outcome unknown until `tcl` gives up: the refusals
    after it settle nothing, so tcl keeps trying, then prints the --request-id hint."""
    async def scenario(h: Harness) -> None:
        await h.start_master()
        server, flaky, proxy = await start_losing(h.address, lose=1)
        gone = asyncio.get_running_loop().create_future()
        proxy.after_loss = lambda: gone.done() or gone.set_result(None)   # type: ignore[attr-defined]

        async def stop_when_gone() -> None:
            await gone
            await server.stop(0)
        stopper = asyncio.ensure_future(stop_when_gone())
        code = await asyncio.to_thread(tcl, ["--master", flaky, "--wait-leader-s", "1", "submit", "--", "true"])
        await stopper
        err = capsys.readouterr().err
        assert code == 1 and "the job may or may not exist" in err, err
        request_id = err.split("--request-id ")[1].split()[0]
        assert await asyncio.to_thread(tcl, ["--master", h.address, "submit", "--request-id", request_id,
                                             "--", "true"]) == 0
        listed = await h.jobs.List(jobs_pb2.ListJobsRequest(all=True))
        assert [j.id for j in listed.jobs] == [capsys.readouterr().out.strip()]
    run(scenario, tmp_path)
