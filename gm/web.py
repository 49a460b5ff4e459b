"""tcl-gm's HTTP side (issue 35, operable): /metrics in Prometheus text, /api/v1/status as
JSON and / as a small status page, on --http HOST:PORT (off by default). Read-only: the
same facts as the Status RPC (GMs, LMs, view ages, pending, launches, inconsistencies).

`snapshot` reads the daemon once; `metrics_text` and `status_page` are pure over it."""

from __future__ import annotations

import html
import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import web

PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class LMRow:
    name: str
    index: int
    address: str
    connected: bool
    usable: bool
    view_age_s: float | None        # None: no state of the current epoch yet
    epoch: int
    nodes: int
    free_millicores: int
    free_memory_mib: int


@dataclass(frozen=True)
class GMSnapshot:
    name: str
    index: int
    gms: int                         # GMs of the federation (--gms, or this one)
    queues: tuple[str, ...]          # the queues this GM serves (--queue-map)
    pending: int                     # tasks waiting at this GM, unanswered Places included
    unanswered: int                  # Places sent with no answer yet (sent again, same id)
    launches: int
    repartitions: int
    preemptions: int
    internal_inconsistencies: int
    external_inconsistencies: int
    stale_epochs: int                # Places refused for an old LM epoch
    lm_refusals: int                 # tasks FAILED by an LM's refusal no resend can fix
    lms: tuple[LMRow, ...]


def snapshot(daemon: Any, now: float) -> GMSnapshot:
    """The daemon's facts at monotonic `now` (GMDaemon: gm/daemon.py)."""
    st, s = daemon.gm.stats, daemon.s
    lms = []
    for i, link in enumerate(daemon.links):
        epoch = nodes = cpu = mem = 0
        if link.layout is not None and link.view is not None:
            epoch, nodes = link.layout.epoch, len(link.layout.names)
            cpu, mem = sum(f[0] for f in link.view.free), sum(f[1] for f in link.view.free)
        lms.append(LMRow(link.name, i, link.addr or "|".join(link.addrs), link.connected, link.usable,
                         now - link.last_state if link.last_state else None, epoch, nodes, cpu, mem))
    return GMSnapshot(
        s.name, s.index, len(s.gm_names()), tuple(sorted(q for q, g in s.queue_map.items() if g == s.name)),
        daemon.gm.pending() + len(daemon.unanswered), len(daemon.unanswered), st.launches, st.repartitions,
        st.preemptions, st.internal_inconsistencies, st.external_inconsistencies, st.refused,
        daemon.placer.refused, tuple(lms))


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def metrics_text(snap: GMSnapshot) -> str:
    gm = f'gm="{_label(snap.name)}"'
    lines = [
        "# HELP tcluster_gm_info This GM: its name and index.", "# TYPE tcluster_gm_info gauge",
        f'tcluster_gm_info{{{gm},index="{snap.index}"}} 1',
        "# HELP tcluster_gm_federation_gms GMs of the federation.", "# TYPE tcluster_gm_federation_gms gauge",
        f"tcluster_gm_federation_gms{{{gm}}} {snap.gms}",
        "# HELP tcluster_gm_pending_tasks Tasks waiting at this GM (unanswered Places included).",
        "# TYPE tcluster_gm_pending_tasks gauge", f"tcluster_gm_pending_tasks{{{gm}}} {snap.pending}",
        "# HELP tcluster_gm_unanswered_places Places sent with no answer yet (sent again with the same id).",
        "# TYPE tcluster_gm_unanswered_places gauge", f"tcluster_gm_unanswered_places{{{gm}}} {snap.unanswered}",
    ]
    for name, value, what in (
            ("launches", snap.launches, "Tasks launched at an LM."),
            ("repartitions", snap.repartitions, "Launches on another GM's partition (a logical node)."),
            ("preemptions", snap.preemptions, "Tasks of other queues stopped for this GM's (Alg. 2)."),
            ("stale_epochs", snap.stale_epochs, "Places refused for an old LM epoch."),
            ("lm_refusals", snap.lm_refusals, "Tasks FAILED by an LM refusal no resend can fix.")):
        lines += [f"# HELP tcluster_gm_{name}_total {what}", f"# TYPE tcluster_gm_{name}_total counter",
                  f"tcluster_gm_{name}_total{{{gm}}} {value}"]
    lines += ["# HELP tcluster_gm_inconsistencies_total Places an LM found inconsistent with its state.",
              "# TYPE tcluster_gm_inconsistencies_total counter",
              f'tcluster_gm_inconsistencies_total{{{gm},kind="internal"}} {snap.internal_inconsistencies}',
              f'tcluster_gm_inconsistencies_total{{{gm},kind="external"}} {snap.external_inconsistencies}']
    per_lm: list[tuple[str, str, str]] = [
        ("lm_connected", "gauge", "1 while the LM's Subscribe stream is up."),
        ("lm_usable", "gauge", "1 while this GM places on the LM (a fresh view)."),
        ("lm_view_age_seconds", "gauge", "Age of the LM's last state (absent before the first)."),
        ("lm_epoch", "gauge", "The LM's layout epoch."), ("lm_nodes", "gauge", "Nodes in the LM's layout."),
        ("lm_free_millicores", "gauge", "Free CPU in the LM's view."),
        ("lm_free_memory_mib", "gauge", "Free memory in the LM's view.")]
    for metric, kind, what in per_lm:
        lines += [f"# HELP tcluster_gm_{metric} {what}", f"# TYPE tcluster_gm_{metric} {kind}"]
        for lm in snap.lms:
            sample = _lm_value(lm, metric)
            if sample is not None:
                lines.append(f'tcluster_gm_{metric}{{{gm},lm="{_label(lm.name)}"}} {sample}')
    return "\n".join(lines) + "\n"


def _lm_value(lm: LMRow, metric: str) -> str | None:
    values: dict[str, float | int | None] = {
        "lm_connected": int(lm.connected), "lm_usable": int(lm.usable),
        "lm_view_age_seconds": None if lm.view_age_s is None else round(lm.view_age_s, 3),
        "lm_epoch": lm.epoch, "lm_nodes": lm.nodes, "lm_free_millicores": lm.free_millicores,
        "lm_free_memory_mib": lm.free_memory_mib}
    value = values[metric]
    return None if value is None else str(value)


def status_page(snap: GMSnapshot) -> str:
    """The federation page: this GM's counters and one row per LM."""
    e = html.escape
    head = (f"<h1>tcl-gm {e(snap.name)} (index {snap.index} of {snap.gms} GMs)</h1>"
            f"<p>queues: {e(', '.join(snap.queues) or '-')} &middot; pending {snap.pending} "
            f"(unanswered {snap.unanswered}) &middot; launches {snap.launches} &middot; repartitions "
            f"{snap.repartitions} &middot; preemptions {snap.preemptions} &middot; inconsistencies "
            f"{snap.internal_inconsistencies} internal, {snap.external_inconsistencies} external &middot; "
            f"stale epochs {snap.stale_epochs} &middot; LM refusals {snap.lm_refusals}</p>")
    rows = "".join(
        f"<tr><td>{e(lm.name)}</td><td>{e(lm.address)}</td><td>{'yes' if lm.connected else 'no'}</td>"
        f"<td>{'yes' if lm.usable else 'no'}</td><td>{'-' if lm.view_age_s is None else f'{lm.view_age_s:.1f}'}</td>"
        f"<td>{lm.epoch}</td><td>{lm.nodes}</td><td>{lm.free_millicores / 1000:g}</td><td>{lm.free_memory_mib}</td></tr>"
        for lm in snap.lms)
    table = ("<table border=1 cellpadding=4><tr><th>LM</th><th>address</th><th>connected</th><th>placing</th>"
             "<th>view age s</th><th>epoch</th><th>nodes</th><th>free cpu</th><th>free MiB</th></tr>"
             f"{rows}</table>")
    return (f"<!doctype html><html><head><meta charset=utf-8><meta http-equiv=refresh content=5>"
            f"<title>tcl-gm {e(snap.name)}</title></head><body>{head}{table}"
            "<p><a href=/metrics>/metrics</a> &middot; <a href=/api/v1/status>/api/v1/status</a></p></body></html>")


def build_app(daemon: Any) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=metrics_text(snapshot(daemon, time.monotonic())).encode(),
                            headers={"Content-Type": PROMETHEUS})

    async def status(_: web.Request) -> web.Response:
        return web.Response(text=json.dumps(asdict(snapshot(daemon, time.monotonic()))),
                            content_type="application/json")

    async def page(_: web.Request) -> web.Response:
        return web.Response(text=status_page(snapshot(daemon, time.monotonic())), content_type="text/html")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/v1/status", status)
    app.router.add_get("/", page)
    return app


async def start_http(daemon: Any, listen: str) -> tuple[web.AppRunner, int]:
    """Serves on HOST:PORT; the runner (cleanup() stops it) and the bound port."""
    host, _, port = listen.rpartition(":")
    runner = web.AppRunner(build_app(daemon), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host.strip("[]") or "127.0.0.1", int(port))
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else int(port)     # port 0: the one bound
    return runner, int(bound)
