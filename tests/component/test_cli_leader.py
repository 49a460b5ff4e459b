"""`tcl --master a,b` against real in-process gRPC servers: a standby (master/standby.py
with a fake LeaderView) sends the CLI on to the leader (the real master of the harness);
an address that refuses connections is passed over."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Awaitable, Callable, Iterator

import grpc
import pytest

from tcluster.cli.leader import forget_leaders
from tcluster.cli.main import main as tcl
from tcluster.master.standby import LeaderInfo, StandbyInterceptor
from tcluster.v1 import jobs_pb2_grpc
from tests.component.harness import Harness, run


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


def closed_port() -> str:
    """An address nothing listens on: the connection is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture(autouse=True)
def _fresh_process() -> Iterator[None]:
    forget_leaders()
    yield
    forget_leaders()


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
