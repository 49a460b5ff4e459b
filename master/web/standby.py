"""What a standby master serves on --http until it leads (etcd HA): `/healthz` (alive),
`/readyz` (503: a load balancer or kubelet sends no traffic to a standby) and `/metrics` with
`tcluster_build_info`, `tcluster_master_leader 0` and the process's own series, so that
`sum(tcluster_master_leader)` over every master's target counts the leaders and an alert can
see a standby that is up but never leads. Nothing of the cluster's state is served (a standby
holds none to serve): no token is asked, as none is for the health probes. When this master
leads, the dashboard takes the address over (RunningMaster.lead); a master that loses its
lease re-executes itself and comes back as a standby."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tcluster.master.usage.opsmetrics import Outcomes, ops_registry

STANDBY_PATHS = ("/healthz", "/readyz", "/metrics")


class StandbyHttp:
    def __init__(self) -> None:
        self.registry = ops_registry(None, Outcomes())      # no service: leader 0, no outcome counted
        self.port = 0
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes([web.get("/healthz", self.healthz), web.get("/readyz", self.readyz),
                        web.get("/metrics", self.metrics), web.get("/{tail:.*}", self.elsewhere)])
        return app

    async def start(self, address: str) -> int:
        host, _, port = address.rpartition(":")
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, host.strip("[]"), int(port)).start()
        except OSError:
            await self._runner.cleanup()
            self._runner = None
            raise
        self.port = self._runner.addresses[0][1]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok: standby\n")

    async def readyz(self, request: web.Request) -> web.Response:
        return web.Response(status=503, text="not ready: a standby (another master leads; this one takes over "
                                             "if it stops)\n")

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def elsewhere(self, request: web.Request) -> web.Response:
        return web.Response(status=503, text="a standby master: the dashboard and API are served by the leader "
                                             "(tcl-master status names it)\n")
