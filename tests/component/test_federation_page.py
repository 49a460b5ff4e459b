"""The master's dashboard shows the federation when the master is an LM (issue 35, part D):
GET /api/v1/federation names the GM subscribed (index, name) with the age of its view, the
Places answered (a launch for each placed task), what is pending and what runs; the page is
linked from the nav; a master that is no LM says so."""

from __future__ import annotations

import socket
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from tests.component.harness import Harness, run, wait_until
from tcluster.gm.daemon import GMDaemon
from tcluster.gm.settings import settings_from
from tcluster.v1 import common_pb2, federation_pb2 as fpb, federation_pb2_grpc, jobs_pb2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_dashboard_shows_the_lms_gms_places_and_view_ages(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master(federation_lm_id=0, federation_gms=2, federation_state_interval_s=0.3,
                             http="127.0.0.1:0")
        await h.add_agent("n1", cpus=8)
        await h.add_agent("n2", cpus=8)
        port = _free_port()
        gm = GMDaemon(settings_from(dict(name="gm-east", index=1, listen=f"127.0.0.1:{port}",
                                         state_dir=str(tmp_path / "gm"), lms=f"lm0={h.address}",
                                         gms=f"gm-west=127.0.0.1:1,gm-east=127.0.0.1:{port}",
                                         queue_map="a=gm-east")))
        await gm.start()
        assert h.master is not None and h.master.dashboard is not None
        client = TestClient(TestServer(h.master.dashboard.app()))
        await client.start_server()
        try:
            stub = federation_pb2_grpc.GlobalManagerServiceStub(gm.channel(f"127.0.0.1:{port}"))
            spec = jobs_pb2.JobSpec(queue="a", tasks=3, command=["sleep"],
                                    resources=common_pb2.Resources(cpu=1, memory=2**28))
            job_id = (await stub.Submit(fpb.FedSubmitRequest(spec=spec), timeout=10)).id

            async def running() -> bool:
                got = await stub.Get(fpb.FedGetRequest(id=job_id), timeout=10)
                return [t.state for t in got.tasks] == ["RUNNING"] * 3
            await wait_until(running)
            doc = await (await client.get("/api/v1/federation")).json()
            assert doc["federation"] is True
            assert doc["lm"]["index"] == 0 and doc["lm"]["gms"] == 2 and doc["lm"]["nodes"] == 2
            assert [(g["index"], g["name"]) for g in doc["gms"]] == [(1, "gm-east")]
            assert 0 <= doc["gms"][0]["view_age_s"] < 30 and doc["gms"][0]["closed"] is False
            answers = doc["answers"]
            assert answers["launches"] + answers["repartitions"] == 3, answers     # one per task placed
            assert answers["inconsistencies"] == 0 and answers["preemptions"] == 0
            assert doc["running_tasks"] == 3 and doc["pending"]["places"] == 0
            index = await (await client.get("/")).text()
            assert 'href="#/federation"' in index
            await stub.Cancel(fpb.FedCancelRequest(id=job_id), timeout=10)
        finally:
            await client.close()
            await gm.stop()

        async def unsubscribed() -> bool:
            doc = await (await client2.get("/api/v1/federation")).json()
            return doc["gms"] == []
        client2 = TestClient(TestServer(h.master.dashboard.app()))
        await client2.start_server()
        try:
            await wait_until(unsubscribed)          # a GM gone is no longer listed
        finally:
            await client2.close()
    run(scenario, tmp_path)


def test_a_master_that_is_no_lm_says_so(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master(http="127.0.0.1:0")
        assert h.master is not None and h.master.dashboard is not None
        client = TestClient(TestServer(h.master.dashboard.app()))
        await client.start_server()
        try:
            assert await (await client.get("/api/v1/federation")).json() == {"federation": False}
        finally:
            await client.close()
    run(scenario, tmp_path)
