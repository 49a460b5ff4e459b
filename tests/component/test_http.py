"""The dashboard's HTTP side against a live in-process master and a fake agent: the JSON
API (shapes equal to `tcl -o json`), usage history, OOM events, /metrics parsed by
prometheus_client's own parser, static assets, and history across a master restart."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from tcluster.agent.runtime.base import RawUsage
from tcluster.cli.replies import reply_job_json as job_json, reply_node_json as node_json
from tcluster.master.usage.recorder import Recorder
from tcluster.v1 import common_pb2, jobs_pb2
from tests.component.harness import Harness, run

MiB = 2**20
RUNNING = common_pb2.TASK_RUNNING


def _volatile(doc: dict) -> dict:
    """A job document without the fields that move between two reads (usage, shares)."""
    doc = {k: v for k, v in doc.items() if k not in ("dominant_share", "task_states")}
    doc["tasks"] = [{k: v for k, v in t.items() if k != "usage"} for t in doc["tasks"]]
    return doc


async def _client(h: Harness) -> TestClient:
    client = TestClient(TestServer(h.master.dashboard.app()))
    await client.start_server()
    return client


def _feed(h: Harness, keys: list[str], seconds: int, oom_at: int = -1) -> None:
    """Usage samples as a cgroup would give them: CPU time grows 0.5 s per second."""
    runtime = h.agents["n1"].runtime
    now = time.time()
    for i, key in enumerate(keys):
        runtime.set_usage(key, RawUsage(
            at=now, mono=1000.0 + seconds, cpu_ns=int(seconds * 0.5e9), user_ns=int(seconds * 0.4e9),
            system_ns=int(seconds * 0.1e9), memory_bytes=(100 + 10 * i) * MiB, anon_bytes=60 * MiB,
            file_bytes=40 * MiB, memory_peak_bytes=200 * MiB, pids=3, oom_kills=1 if 0 <= oom_at <= seconds else 0))


def test_api_metrics_and_history_of_a_live_master(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master(http="127.0.0.1:0", history_flush_s=0.5)
        await h.add_agent("n1")
        job = await h.submit(["sleep", "1000"], cpu=0.5, memory=256 * MiB, tasks=2)
        await h.wait_job(job.id, lambda j: all(t.state == RUNNING for t in j.tasks))
        keys = h.agents["n1"].runtime.running_keys()
        for second in range(1, 8):
            _feed(h, keys, second, oom_at=5)
            await _wait_beats(h, 2)
        client = await _client(h)
        try:
            await _check_job_documents(h, client, job.id)
            await _check_usage(client, job.id)
            await _check_metrics(client, job.id)
            await _check_pages(client)
            runtime = h.agents["n1"].runtime
            runtime.finish(keys[0], None, 9)
            await h.wait_job(job.id, lambda j: j.tasks[0].state != 3)
            await _check_outcomes(client, {"FAILED": 1.0}, {})
            await h.jobs.Cancel(jobs_pb2.CancelJobRequest(id=job.id))
            await h.wait_job(job.id, lambda j: j.state == jobs_pb2.JOB_CANCELLED)
            await _check_outcomes(client, {"FAILED": 1.0, "KILLED": 1.0}, {"CANCELLED": 1.0})
        finally:
            await client.close()
        await _wait_beats(h, 3)     # a flush or two
        await h.stop_master()
        await h.start_master(http="127.0.0.1:0")
        client = await _client(h)
        try:
            usage = await (await client.get(f"/api/v1/jobs/{job.id}/usage", params={"since": "0"})).json()
            ended = usage["tasks"][0]
            assert ended["state"] != "RUNNING" and len(ended["series"]["t"]) >= 1, ended
            assert ended["ooms"] and ended["ooms"][0]["node"] == "n1"
            metrics = await (await client.get("/metrics")).text()
            assert 'tcluster_oom_kills_total{node="n1",queue="default"} 2.0' in metrics   # kept across the restart
            await _check_outcomes(client, {}, {})       # a new process's counters; the ended job not counted again
        finally:
            await client.close()
    run(scenario, tmp_path)


async def _wait_beats(h: Harness, count: int) -> None:
    await asyncio.sleep(0.2 * count + 0.05)


async def _check_job_documents(h: Harness, client: TestClient, job_id: str) -> None:
    by_grpc = job_json(await h.job(job_id))
    got = await (await client.get(f"/api/v1/jobs/{job_id}")).json()
    assert _volatile(got) == _volatile(by_grpc)
    listed = await client.get("/api/v1/jobs", params={"state": "running", "q": job_id[:4]})
    assert listed.headers["X-Total-Count"] == "1"
    [doc] = await listed.json()
    assert _volatile(doc) == _volatile(by_grpc) and doc["task_states"] == {"RUNNING": 2}
    assert await (await client.get("/api/v1/jobs", params={"queue": "nope"})).json() == []
    missing = await client.get("/api/v1/jobs/nope")
    assert missing.status == 404 and "not found" in (await missing.json())["error"]
    nodes = await (await client.get("/api/v1/nodes")).json()
    by_grpc_nodes = [node_json(n) for n in (await h.cluster.ListNodes(jobs_pb2.ListNodesRequest())).nodes]
    assert [n["name"] for n in nodes] == [n["name"] for n in by_grpc_nodes] == ["n1"]
    assert nodes[0].keys() == by_grpc_nodes[0].keys()
    queues = await (await client.get("/api/v1/queues")).json()
    assert queues["queues"][0]["path"] == "default" and queues["queues"][0]["running_tasks"] == 2


async def _check_usage(client: TestClient, job_id: str) -> None:
    usage = await (await client.get(f"/api/v1/jobs/{job_id}/usage")).json()
    assert usage["limits"]["memory"] == 256 * MiB and len(usage["tasks"]) == 2
    task = usage["tasks"][0]
    series = task["series"]
    assert len(series["t"]) >= 3 and series["step_s"] == 0.2
    assert series["memory_working_set"][-1] == 60 * MiB               # usage minus page cache
    assert series["memory_cache"][-1] == 40 * MiB and series["memory_anon"][-1] == 60 * MiB
    assert series["cpu_user"][-1] is not None and series["pids"][-1] == 3
    assert [o["kills"] for o in task["ooms"]] == [1] and task["ooms"][0]["node"] == "n1"
    node = await (await client.get("/api/v1/nodes/n1/usage")).json()
    assert node["series"]["cpu_allocated"][-1] == 1.0 and node["series"]["cpu_capacity"][-1] == 4.0
    assert len(node["tasks"]) == 2
    overview = await (await client.get("/api/v1/overview")).json()
    assert overview["nodes"] == {"READY": 1} and overview["jobs"]["RUNNING"] == 1
    assert overview["oom_kills"] == 2 and overview["gpus"] is None          # no node has GPUs
    cluster = await (await client.get("/api/v1/cluster/usage")).json()
    assert cluster["series"]["cpu_allocated"][-1] == 1.0


async def _check_metrics(client: TestClient, job_id: str) -> None:
    response = await client.get("/metrics")
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(await response.text())}
    cpu = [s for s in families["tcluster_task_cpu_usage_seconds"].samples if s.labels["job_id"] == job_id]
    assert {s.labels["task"] for s in cpu} == {"0", "1"} and all(s.labels["node"] == "n1" for s in cpu)
    assert set(cpu[0].labels) == {"job_id", "job_name", "task", "node", "queue", "user"}
    assert families["tcluster_task_cpu_usage_seconds"].type == "counter"
    ws = [s.value for s in families["tcluster_task_memory_working_set_bytes"].samples]
    assert 60 * MiB in ws
    assert families["tcluster_task_memory_limit_bytes"].samples[0].value == 256 * MiB
    ooms = {(s.labels["node"], s.labels["queue"]): s.value for s in families["tcluster_oom_kills"].samples
            if s.name.endswith("_total")}
    assert ooms == {("n1", "default"): 2.0}
    assert [s.value for s in families["tcluster_node_cpu_allocated_cores"].samples] == [1.0]
    assert families["tcluster_scheduler_round_duration_seconds"].type == "histogram"
    assert families["tcluster_queue_guaranteed_share"].samples[0].value == 1.0


async def _check_outcomes(client: TestClient, tasks: dict[str, float], jobs: dict[str, float]) -> None:
    """The operator's series (master/usage/opsmetrics.py): build, leadership, process, outcomes
    (asked again for a while: a cancelled task ends when its agent says it has stopped)."""
    for _ in range(100):
        try:
            return await _outcomes_once(client, tasks, jobs)
        except AssertionError:
            await asyncio.sleep(0.1)
    await _outcomes_once(client, tasks, jobs)


async def _outcomes_once(client: TestClient, tasks: dict[str, float], jobs: dict[str, float]) -> None:
    families = {f.name: f for f in text_string_to_metric_families(await (await client.get("/metrics")).text())}
    [info] = families["tcluster_build_info"].samples
    assert info.value == 1 and info.labels["version"] and info.labels["commit"]
    assert families["tcluster_master_leader"].samples[0].value == 1
    assert families["process_cpu_seconds"].samples[0].value > 0          # the master's own process
    assert families["process_resident_memory_bytes"].samples[0].value > 0
    for name, want in (("tcluster_tasks_finished", tasks), ("tcluster_jobs_finished", jobs)):
        got = {s.labels["state"]: s.value for s in families[name].samples if s.name.endswith("_total")}
        assert {k: v for k, v in got.items() if v} == want, (name, got)
        assert set(got) >= {"FAILED"}                         # every final state has a series, zeros too


async def _check_pages(client: TestClient) -> None:
    index = await client.get("/")
    assert index.status == 200 and "uPlot" in await index.text()
    vendored = await client.get("/static/vendor/uPlot.iife.min.js")
    assert vendored.status == 200 and len(await vendored.read()) > 30_000
    assert (await client.get("/static/../app.py")).status in (403, 404)


def test_without_http_there_is_no_dashboard_and_no_observer(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        service = h.master.service
        assert h.master.dashboard is None and service.plugins.observer is None
        assert not any(isinstance(listener, Recorder) for listener in service.plugins.listeners)
    run(scenario, tmp_path)


def test_task_metrics_can_be_turned_off(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master(http="127.0.0.1:0", task_metrics=False)
        await h.add_agent("n1")
        job = await h.submit(["sleep", "1000"])
        await h.wait_job(job.id, lambda j: j.tasks[0].state == RUNNING)
        client = await _client(h)
        try:
            text = await (await client.get("/metrics")).text()
            assert "tcluster_task_" not in text and "tcluster_node_up" in text
        finally:
            await client.close()
    run(scenario, tmp_path)

