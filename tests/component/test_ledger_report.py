"""The usage ledger through the in-process master, on both stores: `Report` and `History`
sum the attempts' usage as the agents reported it, and say the same after a master restart
(the rows were written with the ends: nothing is counted twice or lost)."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tcluster.agent.runtime.base import RawUsage
from tcluster.v1 import jobs_pb2
from tests.component.harness import Harness, run, wait_until


pytestmark = pytest.mark.usefixtures("store")   # every test on both stores (conftest.py)


def _done(job: jobs_pb2.Job) -> bool:
    return job.state in (jobs_pb2.JOB_SUCCEEDED, jobs_pb2.JOB_FAILED, jobs_pb2.JOB_CANCELLED)


async def _report(h: Harness, by: str) -> dict[str, jobs_pb2.ReportLine]:
    reply = await h.jobs.Report(jobs_pb2.ReportRequest(since=time.time() - 7200, until=time.time() + 60, by=by))
    return {line.key: line for line in reply.lines}


def test_report_and_history_sum_the_reported_usage_across_a_restart(tmp_path: Path) -> None:
    async def scenario(h: Harness) -> None:
        await h.start_master()
        agent = await h.add_agent("n1")
        job = await h.submit(["sleep", "99"], tasks=2)
        await wait_until(lambda: _started(agent, 2))
        for n, spec in enumerate(agent.runtime.started):
            agent.runtime.set_usage(spec.key, RawUsage(at=time.time(), cpu_ns=(n + 1) * 90 * 10**9,
                                                       memory_peak_bytes=(n + 1) * 2**20))
        await _sampled(h, job.id)
        agent.runtime.finish(agent.runtime.started[0].key, 0)
        agent.runtime.finish(agent.runtime.started[1].key, 3)
        await h.wait_job(job.id, _done)
        failing = await h.submit(["false"])
        await h.wait_job(failing.id, _done)

        for restart in (False, True):
            if restart:
                await h.stop_master()
                await h.start_master()
            # a job's state is answered from memory; its rows are on disk once its step is (moments later)
            by_job = await wait_until(lambda: _report_with(h, {job.id, failing.id}))
            assert by_job[job.id].attempts == 2 and by_job[job.id].failures == 1 and by_job[job.id].jobs == 1
            assert by_job[job.id].cpu_hours == pytest.approx(270 / 3600)      # 90 s + 180 s
            assert by_job[failing.id].failures == 1
            [line] = (await _report(h, "user")).values()
            assert (line.attempts, line.jobs) == (3, 2) and line.cpu_hours == pytest.approx(270 / 3600)
            history = await h.jobs.History(jobs_pb2.HistoryRequest(since=time.time() - 7200))
            mine = sorted((r.state, r.exit_code, r.memory_peak_bytes) for r in history.rows if r.job_id == job.id)
            assert mine == [("FAILED", 3, 2 * 2**20), ("SUCCEEDED", 0, 2**20)]
            failed = await h.jobs.History(jobs_pb2.HistoryRequest(since=time.time() - 7200, states=["FAILED"]))
            assert len(failed.rows) == 2
    run(scenario, tmp_path)


async def _report_with(h: Harness, jobs: set[str]) -> dict[str, jobs_pb2.ReportLine] | None:
    lines = await _report(h, "job")
    return lines if jobs <= set(lines) else None


def _started(agent: object, count: int) -> object:
    async def check() -> bool:
        return len(agent.runtime.started) >= count   # type: ignore[attr-defined]
    return check()


async def _sampled(h: Harness, job_id: str) -> None:
    """Waits until the master has seen both tasks' CPU time (a heartbeat's sample)."""
    async def check() -> bool:
        job = await h.job(job_id)
        return all(t.usage.cpu_seconds > 0 for t in job.tasks)
    await wait_until(check)


@pytest.mark.parametrize("store", ["etcd"], indirect=True)
def test_etcd_a_new_leader_reports_the_hours_from_etcd_without_the_old_detail(tmp_path: Path, store: str) -> None:
    """A master that never saw the ends (another data dir: a failover) and a master whose
    local write of the detail failed after etcd committed (a crash in between) both report
    the whole hours right from etcd's sums."""

    async def scenario(h: Harness) -> None:
        await h.start_master()
        agent = await h.add_agent("n1")
        h.master.store.ledger = None          # type: ignore[union-attr]   # the detail write "crashes"
        job = await h.submit(["sleep", "99"])
        await wait_until(lambda: _started(agent, 1))
        agent.runtime.set_usage(agent.runtime.started[0].key, RawUsage(at=time.time(), cpu_ns=360 * 10**9))
        await _sampled(h, job.id)
        agent.runtime.finish(agent.runtime.started[0].key, 0)
        await h.wait_job(job.id, _done)
        for data_dir in (h.tmp / "master", h.tmp / "other-master"):
            await h.stop_master()
            await h.start_master(data_dir=data_dir)
            hour = int(time.time() // 3600) * 3600
            reply = await wait_until(lambda: h.jobs.Report(jobs_pb2.ReportRequest(
                since=hour - 3600, until=hour + 7200, by="user")))
            assert [(line.attempts, line.jobs) for line in reply.lines] == [(1, 1)]
            assert reply.lines[0].cpu_hours == pytest.approx(0.1)
    run(scenario, tmp_path)


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)   # the page reads the same service on both
def test_the_dashboard_usage_page_shows_the_report_by_queue_and_user(tmp_path: Path, store: str) -> None:
    """/api/v1/usage/report answers what Report answers; the Usage page (#/usage) shows its
    lines in headless Chromium where one is installed."""

    async def scenario(h: Harness) -> None:
        await h.start_master(http="127.0.0.1:0")
        agent = await h.add_agent("n1")
        job = await h.submit(["sleep", "99"])
        await wait_until(lambda: _started(agent, 1))
        agent.runtime.set_usage(agent.runtime.started[0].key, RawUsage(at=time.time(), cpu_ns=720 * 10**9))
        await _sampled(h, job.id)
        agent.runtime.finish(agent.runtime.started[0].key, 0)
        await h.wait_job(job.id, _done)
        await wait_until(lambda: _report_with(h, {job.id}))
        client = TestClient(TestServer(h.master.dashboard.app()))   # type: ignore[union-attr]
        await client.start_server()
        try:
            reply = await client.get("/api/v1/usage/report", params={"by": "queue"})
            body = await reply.json()
            assert reply.status == 200 and [(x["queue"], x["attempts"]) for x in body["lines"]] == [("default", 1)]
            assert body["lines"][0]["cpu_hours"] == pytest.approx(0.2)
            assert (await client.get("/api/v1/usage/report", params={"by": "node"})).status == 400
        finally:
            await client.close()
        if shutil.which("chromium") and shutil.which("chromedriver"):
            port = h.master.dashboard.port     # type: ignore[union-attr]
            cells = await asyncio.to_thread(_page_cells, f"http://127.0.0.1:{port}/#/usage")
            assert cells["queue"] == [["default", "0.20", "0.00", "1", "1", "0", cells["queue"][0][-1]]]
            assert [row[1:5] for row in cells["user"]] == [["0.20", "0.00", "1", "1"]]
    run(scenario, tmp_path)


def _page_cells(url: str) -> dict[str, list[list[str]]]:
    from testkit.browser import browser
    driver = browser()
    try:
        driver.get(url)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            found = driver.execute_script(
                "const out = {}; for (const t of document.querySelectorAll('table.usage')) out[t.dataset.by] = "
                "[...t.querySelectorAll('tr[data-key]')].map(r => [...r.cells].map(c => c.textContent)); return out;")
            if found and found.get("queue"):
                return found          # type: ignore[no-any-return]
            time.sleep(0.3)
        raise AssertionError("the usage page showed no lines: " + driver.page_source[:2000])
    finally:
        driver.quit()
