"""GPU usage on the job page's charts: an in-process master and an agent offering two GPUs
through a fake NVML. Each heartbeat's samples become per-task GPU series (mean utilization,
memory used and total, devices), served by /api/v1/jobs/ID/usage, written to the history
file with the task's own series, and read back from it after the task ends and the master
restarts. A task without GPUs has none."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tcluster.agent.gpudetect import GpuInventory
from tcluster.agent.gpus import Gpu
from tcluster.v1 import common_pb2
from testkit.browser import browser as _browser, chart as _chart
from tests.component.harness import Harness, run

MiB, GiB = 2**20, 2**30
RUNNING = common_pb2.TASK_RUNNING
# What the fake NVML reports per device; the test changes it between reads.
UTIL = {0: 30.0, 1: 80.0}
USED = {0: 2 * GiB, 1: 6 * GiB}


def fake_nvml() -> types.ModuleType:
    nvml = types.ModuleType("pynvml")
    nvml.nvmlInit = lambda: None  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=UTIL[h], memory=0)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(total=80 * GiB, used=USED[h])  # type: ignore[attr-defined]
    return nvml


GPUS = GpuInventory(tuple(Gpu(i, f"/dev/nvidia{i}", 195, i, "NVIDIA H100 80GB HBM3", 80 * GiB) for i in (0, 1)),
                    source="nvml")


async def _usage(client: TestClient, job_id: str, **params: str) -> dict:
    response = await client.get(f"/api/v1/jobs/{job_id}/usage", params=params)
    assert response.status == 200
    return await response.json()


def test_gpu_series_of_a_job_come_back_through_the_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())

    async def scenario(h: Harness) -> None:
        await h.start_master(http="127.0.0.1:0", history_flush_s=0.5)
        await h.add_agent("g1", gpus=GPUS)
        job = await h.submit(["sleep", "1000"], cpu=0.5, memory=256 * MiB, tasks=2, gpus=1)
        plain = await h.submit(["sleep", "1000"], cpu=0.5, memory=256 * MiB)
        running = await h.wait_job(job.id, lambda j: all(t.state == RUNNING and t.gpus for t in j.tasks))
        await h.wait_job(plain.id, lambda j: j.tasks[0].state == RUNNING)
        device = {t.index: t.gpus[0] for t in running.tasks}
        assert sorted(device.values()) == [0, 1]
        await asyncio.sleep(1.0)                       # five heartbeats of 0.2 s
        client = TestClient(TestServer(h.master.dashboard.app()))
        await client.start_server()
        try:
            usage = await _usage(client, job.id, detail="0")
            assert usage["limits"]["gpus"] == 1
            detail, other = sorted(usage["tasks"], key=lambda t: t["index"])
            gpu = detail["gpu"]
            assert len(gpu["t"]) >= 3 and gpu["step_s"] == 0.2
            assert gpu["gpu_util"][-1] == UTIL[device[0]] and gpu["gpu_memory_used"][-1] == USED[device[0]]
            assert gpu["gpu_memory_total"][-1] == 80 * GiB and gpu["gpus"][-1] == 1
            assert set(other["gpu"]) == {"step_s", "t", "gpu_util"}            # not in detail: utilization only
            assert other["gpu"]["gpu_util"][-1] == UTIL[device[1]]
            assert (await _usage(client, plain.id))["tasks"][0]["gpu"] is None
            overview = await (await client.get("/api/v1/overview")).json()
            assert overview["gpus"] == {"capacity": 2, "allocated": 2, "util_percent": (30.0 + 80.0) / 2}
            assert (await _usage(client, plain.id))["limits"]["gpus"] == 0

            UTIL[device[0]] = 95.0                     # the series follows what NVML says
            await asyncio.sleep(0.6)
            assert (await _usage(client, job.id, detail="0"))["tasks"][0]["gpu"]["gpu_util"][-1] == 95.0
            runtime = h.agents["g1"].runtime
            key = next(k for k in runtime.running_keys() if k.startswith(f"{job.id}.0"))
            runtime.finish(key, 0)
            await h.wait_job(job.id, lambda j: j.tasks[0].state == common_pb2.TASK_SUCCEEDED)
        finally:
            await client.close()
        await asyncio.sleep(0.8)                       # a flush or two
        await h.stop_master()
        await h.start_master(http="127.0.0.1:0")
        again = await h.job(job.id)                    # the bindings survive the master's restart
        assert {t.index: list(t.gpus) for t in again.tasks} == {i: [d] for i, d in device.items()}
        client = TestClient(TestServer(h.master.dashboard.app()))
        await client.start_server()
        try:
            usage = await _usage(client, job.id, detail="0", since="0")
            ended = next(t for t in usage["tasks"] if t["index"] == 0)
            assert ended["state"] == "SUCCEEDED" and ended["gpu"] is not None, ended     # read back from the file
            assert 95.0 in ended["gpu"]["gpu_util"] and ended["gpu"]["gpu_memory_total"][-1] == 80 * GiB
            still = next(t for t in usage["tasks"] if t["index"] == 1)
            assert still["gpu"] is not None and still["gpu"]["gpu_util"][0] == UTIL[device[1]]   # restored running
        finally:
            await client.close()
    run(scenario, tmp_path)


@pytest.mark.skipif(shutil.which("chromium") is None or shutil.which("chromedriver") is None,
                    reason="chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
def test_the_job_page_draws_the_gpu_charts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page itself (headless Chromium): the GPU utilization chart has a line per GPU
    task, the memory chart the chosen task's, and the tasks table a GPUs column."""
    pytest.importorskip("selenium")
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())

    def look(url: str, job_id: str) -> tuple[tuple[int, int], tuple[int, int], str]:
        driver = _browser()
        try:
            driver.get(url)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (_chart(driver, f"job-gpu:{job_id}")[0] < 6
                                                   or _chart(driver, f"job-gpumem:{job_id}")[0] < 6):
                time.sleep(0.3)
            return (_chart(driver, f"job-gpu:{job_id}"), _chart(driver, f"job-gpumem:{job_id}"),
                    driver.execute_script("return document.getElementById('tasks').innerText"))
        finally:
            driver.quit()

    async def scenario(h: Harness) -> None:
        await h.start_master(http="127.0.0.1:0")
        await h.add_agent("g1", gpus=GPUS)
        job = await h.submit(["sleep", "1000"], cpu=0.5, memory=256 * MiB, tasks=2, gpus=1)
        await h.wait_job(job.id, lambda j: all(t.state == RUNNING and t.gpus for t in j.tasks))
        await asyncio.sleep(1.0)
        url = f"http://127.0.0.1:{h.master.dashboard.port}/#/jobs/{job.id}"
        util, memory, table = await asyncio.to_thread(look, url, job.id)
        assert util[0] >= 6 and memory[0] >= 6, (util, memory)     # two tasks' lines; used and total
        assert "GPUs" in table.splitlines()[0]
    run(scenario, tmp_path)
