"""The dashboard's runtime on the master's own event loop: the recorder (fed by the
service), the history store, the aiohttp app (UI, /api/v1/, /metrics) and one background
task that drains the recorder every second, samples the cluster and the queues every
2 s and flushes history to disk every `history_flush_s`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from importlib.resources import files
from pathlib import Path
from typing import Any

from aiohttp import web

from tcluster.master.usage.history import HistoryConfig, TaskRecord
from tcluster.master.usage.historydb import HistoryStore
from tcluster.master.usage.metrics import CONTENT_TYPE, Exposition
from tcluster.master.usage.opsmetrics import Outcomes
from tcluster.master.usage.recorder import Recorder
from tcluster.master.web.api import Api, errors_middleware
from tcluster.master.usagewatch import DEFAULT_WATCH_S, MAX_SCRAPE_NODES
from tcluster.master.web.login import add_login, auth_middleware, check_metrics

log = logging.getLogger(__name__)
DRAIN_S = 1.0
DRAIN_PART_SAMPLES = 1000   # ~25 ms when each is a new task's first, ~5 ms otherwise
SAMPLE_S = 2.0
FINISHED_CACHE = 256
FINISHED_TTL_S = 30.0
STATIC = Path(str(files("tcluster.master.web") / "static"))


def history_config(settings: Any) -> HistoryConfig:
    return HistoryConfig(step_s=settings.heartbeat_interval_s, recent_s=settings.history_recent_s,
                         long_step_s=settings.history_long_step_s, long_s=settings.history_long_s)


class Dashboard:
    def __init__(self, service: Any, settings: Any) -> None:
        self.service, self.settings = service, settings
        self.config = history_config(settings)
        self.recorder = Recorder(self.config)
        self.store = HistoryStore(settings.data_dir / "history.db", self.config)
        self.outcomes = Outcomes()
        self.exposition = Exposition(service, self.recorder, task_metrics=settings.task_metrics,
                                     outcomes=self.outcomes,
                                     dcgm_gpu_metrics=getattr(settings, "dcgm_gpu_metrics", False))
        self._runner: web.AppRunner | None = None
        self._task: asyncio.Task[None] | None = None
        self._writing: asyncio.Future[bool] | None = None
        self._finished: OrderedDict[str, tuple[float, TaskRecord]] = OrderedDict()
        self.port = 0

    # ---- what the API reads ----

    def drain(self) -> None:
        self.recorder.drain(self.service.state)

    async def drained(self) -> None:
        """What was reported before the call, drained in parts with the loop served between
        them (a read at a burst would hold it as a whole drain did): a batch part-way, then
        one taken since the call, each finished (the parts are shared with the loop's)."""
        for _ in range(2):
            await self._drain_batch()

    async def _drain_batch(self) -> None:
        """One batch drained in parts of DRAIN_PART_SAMPLES, the loop served between them."""
        while self.recorder.drain_part(self.service.state, DRAIN_PART_SAMPLES):
            await asyncio.sleep(0)

    def task_record(self, task_id: str) -> TaskRecord | None:
        """In memory while running; a finished task's comes back from disk (and is kept in a
        small cache: it no longer changes, and a job page asks again every 2 s)."""
        record = self.recorder.tasks.get(task_id)
        if record is not None:
            return record
        if task_id.rpartition(".")[0] not in self.service.state.jobs:
            return None
        now = time.monotonic()
        loaded, record = self._finished.pop(task_id, (0.0, None))
        if record is None or now - loaded > FINISHED_TTL_S:     # a retry may have run it again since
            loaded, record = now, self.store.load_task(task_id)
        if record is not None:
            self._finished[task_id] = (loaded, record)
            while len(self._finished) > FINISHED_CACHE:
                self._finished.popitem(last=False)
        return record

    # ---- lifecycle ----

    def app(self) -> web.Application:
        app = web.Application(middlewares=[errors_middleware, auth_middleware])
        add_login(app, getattr(self.service, "gate", None))
        app.add_routes(Api(self.service, self).routes())
        app.add_routes([web.get("/metrics", self.metrics), web.get("/", self.index),
                        web.get("/favicon.ico", self.no_icon), web.get("/healthz", self.healthz),
                        web.get("/readyz", self.readyz),
                        web.static("/static", STATIC, follow_symlinks=False)])
        return app

    async def start(self, address: str) -> int:
        running = {t.id for ts in self.service.state.tasks.values() for t in ts if t.state.holds_resources}
        self.store.restore(self.recorder, running)
        self.service.plugins.observer = self.recorder           # rounds and GPU samples
        self.service.plugins.listeners.append(self.recorder)    # every applied step
        self.outcomes.seed(self.service.state)
        self.service.plugins.listeners.append(self.outcomes)    # job and task ends, for /metrics
        host, _, port = address.rpartition(":")
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host.strip("[]"), int(port))
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            self.service.plugins.observer = None
            self.service.plugins.listeners.remove(self.recorder)
            self.service.plugins.listeners.remove(self.outcomes)
            self.store.close()
            raise
        self.port = self._runner.addresses[0][1]
        self._task = asyncio.create_task(self._loop(), name="dashboard")
        return self.port

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._writing is not None:
            await asyncio.shield(self._writing)     # one writer on the connection at a time
        if self._runner is not None:
            await self._runner.cleanup()
        self.drain()
        self.store.flush(self.recorder)
        self.store.close()

    async def _loop(self) -> None:
        last_sample, tick = 0.0, 0
        parts = max(1, round(self.settings.history_flush_s / DRAIN_S))
        while True:
            await asyncio.sleep(DRAIN_S)
            tick += 1
            try:
                # Steps, not one callback: the loop serves what waits between them. The drain
                # goes in parts (a burst's 9,000 first samples held the loop 230 ms in one
                # drain, issue 38), as a read's does.
                await self._drain_batch()
                await asyncio.sleep(0)
                now = time.monotonic()
                if now - last_sample >= SAMPLE_S:
                    last_sample = now
                    self.recorder.sample_cluster(time.time(), self.service.state,
                                                 [q for q in self.service.list_queues() if not q.user])
                    await asyncio.sleep(0)
                await self._flush_part(tick % parts, parts)
            except asyncio.CancelledError:
                raise
            except Exception:      # the dashboard must never take the master down
                log.exception("dashboard background step failed")

    async def _flush_part(self, part: int, parts: int) -> None:
        """Every second, 1/parts of the changed series: each is written once per flush period."""
        batch = self.store.collect(self.recorder, part, parts)
        if not (batch.chunks or batch.tasks or batch.forgotten):
            self.store.finish(self.recorder, batch, True)
            return
        # If the loop is cancelled meanwhile, _writing stays set and stop() waits for it.
        self._writing = asyncio.ensure_future(asyncio.to_thread(self.store.write, batch))
        ok = await asyncio.shield(self._writing)
        self._writing = None
        self.store.finish(self.recorder, batch, ok)

    # ---- handlers outside the API ----

    async def metrics(self, request: web.Request) -> web.Response:
        check_metrics(request)
        # A scrape may name nodes (Prometheus `params: {node: [n1, n2]}`): they send fresh
        # samples for a while, so its resolution is the scrape's, not the usage interval's.
        nodes = request.query.getall("node", [])
        if nodes:
            self.service.agents.watch_usage(nodes[:MAX_SCRAPE_NODES], DEFAULT_WATCH_S)
        await self.drained()
        return web.Response(body=self.exposition.render(), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(self, request: web.Request) -> web.Response:
        """Alive: the master's event loop answered."""
        return web.Response(text="ok\n")

    async def readyz(self, request: web.Request) -> web.Response:
        """Ready: this master acts (a standby's /readyz is 503: master/web/standby.py) and holds its state;
        503 otherwise. The body says how many nodes are READY and connected, for a person."""
        state = getattr(self.service, "state", None)
        if state is None:
            return web.Response(status=503, text="not ready: no state loaded\n")
        ready = sum(1 for name, node in state.nodes.items()
                    if state.connected(name) and node.state.value == "READY")
        return web.Response(text=f"ok: leading, {ready} of {len(state.nodes)} nodes ready\n")

    async def no_icon(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})
