"""The queues page's data on MCH's Figure 4 run live (scaled to 40 CPUs and 40 GiB): every
leaf's dominant share over time settles where the paper's figure has it while all six
jobs are active, and its guaranteed share rides along."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from tcluster.v1 import jobs_pb2
from tests.component.harness import Harness, run

GiB = 2**30
QUEUES = """\
queues:
  n1: {queues: {n1_1: {}, n1_2: {}}}
  n2: {queues: {n2_1: {}, n2_2: {}, n2_3: {}}}
  n3: {queues: {n3_1: {}}}
"""
# examples/mch-figure4.yaml: n1_2 and n2_3 ask for memory only, the others for CPU only.
JOBS = {"n1.n1_1": (1, 0), "n1.n1_2": (0, GiB), "n2.n2_1": (1, 0), "n2.n2_2": (1, 0), "n2.n2_3": (0, GiB),
        "n3.n3_1": (1, 0)}
FIGURE4 = {"n1.n1_1": 0.33, "n1.n1_2": 0.5, "n2.n2_1": 0.165, "n2.n2_2": 0.165, "n2.n2_3": 0.5, "n3.n3_1": 0.33}


def test_queue_shares_over_time_draw_mch_figure_4(tmp_path: Path) -> None:
    (tmp_path / "queues.yaml").write_text(QUEUES)

    async def scenario(h: Harness) -> None:
        await h.start_master(fairness="mch", queues_file=tmp_path / "queues.yaml", http="127.0.0.1:0")
        for queue, (cpu, memory) in JOBS.items():          # all wait for the nodes: one round sees them
            spec = jobs_pb2.JobSpec(command=["sleep"], tasks=60, queue=queue, name=queue.replace(".", "-"))
            spec.resources.cpu, spec.resources.memory = cpu, memory
            await h.jobs.Submit(jobs_pb2.SubmitRequest(spec=spec))
        for name in ("a", "b"):
            await h.add_agent(name, cpus=20, memory=20 * GiB)
        client = TestClient(TestServer(h.master.dashboard.app()))
        await client.start_server()
        try:
            deadline = asyncio.get_running_loop().time() + 20
            while True:
                usage = (await (await client.get("/api/v1/queues/usage")).json())["queues"]
                last = {q: s["dominant_share"][-1] for q, s in usage.items() if q in FIGURE4 and s["t"]}
                if len(last) == 6 and all(abs(last[q] - want) < 0.03 for q, want in FIGURE4.items()):
                    break
                assert asyncio.get_running_loop().time() < deadline, f"shares {last}, want {FIGURE4}"
                await asyncio.sleep(0.5)
            assert abs(usage["n1.n1_1"]["guaranteed_share"][-1] - 1 / 6) < 0.002   # 1/3 of 1/2
            assert abs(usage["n1"]["dominant_share"][-1] - 0.5) < 0.03      # a parent holds its children's
        finally:
            await client.close()
    run(scenario, tmp_path)
