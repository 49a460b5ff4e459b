"""The JSON API under /api/v1/. Jobs, nodes and queues have the very shapes `tcl -o json`
prints (built by the same functions in tcluster/views/render.py, from the domain values); the
usage endpoints add the history. Everything the web UI shows comes from here.

Handlers run on the master's loop and read its state directly: no locks, no copies.
Who is asking is decided in one place, `authorize` (login.py); what they may see by the
service's gate, as over gRPC."""

from __future__ import annotations

import time
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from tcluster.domain.nodeorders import shown_state
from tcluster.views.formats import timestamp
from tcluster.views.render import queues_json, job_json, node_json, resources_json, task_json, usage_json
from tcluster.domain.errors import (
    InvalidArgument, NotFound, PermissionDenied, ResourceExhausted, TclusterError, Unauthenticated, Unavailable,
)
from tcluster.master.usage.history import TASK, Series, TaskRecord
from tcluster.domain.model import Job, JobState, Task, TaskState
from tcluster.master.usagewatch import DEFAULT_WATCH_S
from tcluster.master.web.params import INDEXES, LIMITS, TAILS, TIMES, indexes, number, parse_number
from tcluster.security.authz import Caller, sees_only_own

DEFAULT_RANGE_S = 900.0
MAX_CHART_TASKS = 40          # a stacked chart of more tasks is unreadable
CPU_FIELDS = ("cpu_user", "cpu_system")
GPU_FIELDS = ("gpu_util",)       # of the tasks not in detail: the job's GPU chart has every task

# Who is asking: set by the app's auth middleware (master/web/login.py authorize).
CALLER = web.RequestKey("caller", Caller)


def _json(value: Any, headers: dict[str, str] | None = None) -> web.Response:
    # orjson: a 1,000-task job is ~650 KB of JSON; the stdlib encoder alone took 40 ms of it
    return web.Response(body=orjson.dumps(value), content_type="application/json", headers=headers)


def time_range(request: web.Request) -> tuple[float, float]:
    now = time.time()
    until = number(request.query, "until", now, TIMES)
    since = number(request.query, "since", until - DEFAULT_RANGE_S, TIMES)
    return since, until


class TaskDocs:
    """Each task's JSON (the shape `tcl -o json` prints), kept while the task and its usage
    sample are the same objects: a job page asks every 2 s, and between two asks most of a
    job's tasks changed only their usage (rebuilt alone)."""

    LIMIT = 50_000

    def __init__(self) -> None:
        self._docs: dict[str, tuple[Task, object, dict[str, Any]]] = {}

    def docs(self, state: Any, tasks: list[Task]) -> list[dict[str, Any]]:
        if len(self._docs) > self.LIMIT:
            self._docs.clear()
        usage_of, cache = state.usage.get, self._docs
        out = []
        for task in tasks:
            usage = usage_of(task.id) if task.state.holds_resources else None
            cached = cache.get(task.id)
            if cached is not None and cached[0] is task:
                if cached[1] is usage:
                    out.append(cached[2])
                    continue
                doc = {**cached[2], "usage": usage_json(usage if usage is not None else task.usage)}
            else:
                doc = task_json(state.task_view(task))
            cache[task.id] = (task, usage, doc)
            out.append(doc)
        return out


class Api:
    def __init__(self, service: Any, dashboard: Any) -> None:
        self.service, self.dashboard = service, dashboard
        self.task_docs = TaskDocs()

    @property
    def state(self) -> Any:
        return self.service.state

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/v1/overview", self.overview),
            web.get("/api/v1/jobs", self.jobs),
            web.get("/api/v1/jobs/{job_id}", self.job),
            web.get("/api/v1/jobs/{job_id}/usage", self.job_usage),
            web.get("/api/v1/jobs/{job_id}/tasks/{index}/logs", self.logs),
            web.get("/api/v1/nodes", self.nodes),
            web.get("/api/v1/nodes/{name}/usage", self.node_usage),
            web.get("/api/v1/queues", self.queues),
            web.get("/api/v1/queues/usage", self.queue_usage),
            web.get("/api/v1/cluster/usage", self.cluster_usage),
            web.get("/api/v1/usage/report", self.usage_report),
            web.get("/api/v1/federation", self.federation),
        ]

    def _own_only(self, request: web.Request) -> bool:
        gate = getattr(self.service, "gate", None)
        return gate is not None and sees_only_own(request[CALLER], gate.policy)

    def _may_see(self, request: web.Request, job_id: str) -> bool:
        return not self._own_only(request) or self.state.jobs[job_id].spec.owner == request[CALLER].name

    # ---- shapes shared with `tcl -o json` ----

    def job_doc(self, job: Job, tasks: list[Task], caller: Caller, with_tasks: bool = True) -> dict[str, Any]:
        """Owner-only values redacted (master/service.py `shown`) for a caller not the owner."""
        view = self.service.shown((self.state.job_view(job), tasks), caller)[0]
        docs = self.task_docs.docs(self.state, tasks) if with_tasks else []
        doc = job_json(view, docs, dominant_share=self.service.dominant_share(job, tasks))
        if not with_tasks:
            doc["tasks_total"] = job.spec.tasks    # an array's indexes, placed or not
        counts = self.state.counts.get(job.id, {})
        doc["task_states"] = {s.value: counts.get(s, 0) for s in TaskState if counts.get(s, 0)}
        return doc

    def queues_doc(self, caller: Caller) -> dict[str, Any]:
        return queues_json(self.service.list_queues(caller), self.service.rounds.fairness.name, self.service.queues.source,
                           self.service.total_capacity())

    # ---- handlers ----

    async def overview(self, request: web.Request) -> web.Response:
        await self.dashboard.drained()
        state = self.state
        nodes: dict[str, int] = {}
        for name, node in state.nodes.items():
            key = shown_state(node.state, node.ops, state.connected(name)).value
            nodes[key] = nodes.get(key, 0) + 1
        jobs = {s.value: 0 for s in JobState}
        for job in state.jobs.values():
            jobs[job.state.value] += 1
        cluster = self.dashboard.recorder.cluster.read(time.time() - 60, time.time())
        last = {k: (v[-1] if isinstance(v, list) and v else 0) for k, v in cluster.items()}
        return _json({
            "capacity": {"cpu": last.get("cpu_capacity") or 0, "memory": int(last.get("memory_capacity") or 0)},
            "allocated": {"cpu": last.get("cpu_allocated") or 0, "memory": int(last.get("memory_allocated") or 0)},
            "used": {"cpu": last.get("cpu_used") or 0, "memory": int(last.get("memory_used") or 0)},
            "tasks": {"running": int(last.get("running_tasks") or 0), "pending": int(last.get("pending_tasks") or 0)},
            "nodes": nodes, "jobs": jobs,
            "oom_kills": sum(self.dashboard.recorder.oom_kills.values()),
            "queues": self.queues_doc(request[CALLER])["queues"], "gpus": self._gpus_now(),
        })

    def _gpus_now(self) -> dict[str, Any] | None:
        """GPUs of the connected nodes: capacity, bound, and the mean utilization of the
        bound ones NVML reported on (null without samples); null where no node has GPUs."""
        state, capacity, allocated = self.state, 0.0, 0.0
        for name, node in state.nodes.items():
            if state.connected(name) and node.capacity.get("gpu"):
                capacity += node.capacity.get("gpu")
                allocated += max(0.0, node.capacity.get("gpu") - state.free(name).get("gpu"))
        if not capacity:
            return None
        board = getattr(self.service, "gpus", None)
        util = [s.util_percent for _, s in board.items()] if board is not None else []
        return {"capacity": int(capacity), "allocated": int(allocated),
                "util_percent": sum(util) / len(util) if util else None}

    async def jobs(self, request: web.Request) -> web.Response:
        states = {_job_state(s) for s in request.query.getall("state", []) if s}
        queue, user, owner = request.query.get("queue", ""), request.query.get("user", ""), request.query.get("owner", "")
        needle = request.query.get("q", "").lower()
        if self._own_only(request):
            owner = request[CALLER].name        # as `tcl jobs` under --status-visibility own
        limit = int(number(request.query, "limit", 100, LIMITS))
        found = []
        for job in sorted(self.state.jobs.values(), key=lambda j: j.submitted_at, reverse=True):
            spec = job.spec
            if (states and job.state not in states) or (queue and not (spec.queue == queue or
                                                                       spec.queue.startswith(queue + "."))):
                continue
            if (user and spec.user != user) or (owner and spec.owner != owner) or \
                    (needle and needle not in spec.name.lower() and needle not in job.id):
                continue
            found.append(job)
        with_tasks = request.query.get("tasks", "true").lower() not in ("0", "false", "no")
        docs = [self.job_doc(j, self.state.tasks[j.id], request[CALLER], with_tasks) for j in found[:limit]]
        return _json(docs, headers={"X-Total-Count": str(len(found))})

    async def job(self, request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]
        job = self.state.jobs.get(job_id)
        if job is not None:        # the state's own task objects: TaskDocs keeps their JSON
            self.service.check_visible(request[CALLER], job)     # NotFound, as for no such job
            return _json(self.job_doc(job, self.state.tasks[job_id], request[CALLER]))
        job, tasks = self.service.read(job_id, request[CALLER])    # finished a while ago: from the store
        return _json(self.job_doc(job, tasks, request[CALLER]))

    async def job_usage(self, request: web.Request) -> web.Response:
        await self.dashboard.drained()
        job, tasks = self.service.read(request.match_info["job_id"], request[CALLER])
        self.service.agents.watch_jobs([(job, tasks)], DEFAULT_WATCH_S)     # an open job page polls this
        since, until = time_range(request)
        wanted = indexes(request.query, "tasks")
        detail = request.query.get("detail", "")      # one task with every series; the others CPU only
        if wanted:
            by_index = {t.index: t for t in tasks}     # an array's rows are by array index
            chosen = [by_index[i] for i in wanted if i in by_index]
        else:
            chosen = [t for t in tasks if t.started_at or t.node][:MAX_CHART_TASKS]
        out = []
        for task in chosen:
            record = self.dashboard.task_record(task.id)
            fields = None if not detail or detail == str(task.index) else CPU_FIELDS
            out.append(task_usage_doc(task, record, since, until, fields))
        spec = job.spec
        marks = [m for m in self.dashboard.recorder.preemptions if since <= m.at <= until
                 and m.task_id.rpartition(".")[0] == job.id]
        return _json({"job_id": job.id, "since": since, "until": until, "tasks": out,
                      "preemptions": [{"at": m.at, "task": int(m.task_id.rpartition(".")[2]), "by_job": m.by_job,
                                       "reason": m.reason} for m in marks],
                      "tasks_total": len(tasks), "limits": {
                          "memory": spec.resources.memory, "cpu_request": spec.resources.cpu,
                          "cpu_limit": spec.cpu_limit, "pids_max": spec.pids_max,
                          "gpus": int(spec.resources.get("gpu"))}})

    async def logs(self, request: web.Request) -> web.StreamResponse:
        index = parse_number("index", request.match_info["index"], INDEXES)
        follow = request.query.get("follow", "") in ("1", "true")
        stderr = request.query.get("stream", "stdout") == "stderr"
        tail = int(number(request.query, "tail", 65536, TAILS))
        pieces = self.service.logs(request.match_info["job_id"], int(index), stderr, tail, follow,
                                   request[CALLER])
        try:
            first = await anext(pieces, b"")      # errors (no such task, node away) before the headers
            response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8",
                                                   "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})
            await response.prepare(request)
            await response.write(first)
            async for piece in pieces:
                await response.write(piece)
            await response.write_eof()
            return response
        finally:
            await pieces.aclose()                 # a reader that left stops the node's follow

    async def nodes(self, request: web.Request) -> web.Response:
        listed = self.service.nodes(request[CALLER])     # only the caller's task ids under visibility own
        return _json([node_json(n, self.service.free(n), tasks, self.service.drain_blockers(n.name))
                      for n, tasks in listed])

    async def node_usage(self, request: web.Request) -> web.Response:
        await self.dashboard.drained()
        name = request.match_info["name"]
        if name not in self.state.nodes:
            raise NotFound(f"node {name!r} not found")
        since, until = time_range(request)
        series = self.dashboard.recorder.nodes.get(name)
        tasks = [{"id": t.id, "job_id": t.job_id, "name": self.state.jobs[t.job_id].spec.name,
                  "state": t.state.value, "usage": _usage_now(self.state.usage.get(t.id))}
                 for t in self.state.tasks_on(name) if self._may_see(request, t.job_id)]
        return _json({"name": name, "since": since, "until": until,
                      "series": series.read(since, until) if series else None, "tasks": tasks})

    async def queues(self, request: web.Request) -> web.Response:
        return _json(self.queues_doc(request[CALLER]))

    async def federation(self, request: web.Request) -> web.Response:
        """This master as a federation LM (master/features/federation_page.py). The LiveLM is
        one of the service's step listeners (master/app/assemble.py): found there, so the
        dashboard needs no second handle on it."""
        from tcluster.master.features.federation_live import LiveLM
        from tcluster.master.features.federation_page import federation_doc
        lm = next((x for x in self.service.plugins.listeners if isinstance(x, LiveLM)), None)
        return _json(federation_doc(lm))

    async def queue_usage(self, request: web.Request) -> web.Response:
        await self.dashboard.drained()
        since, until = time_range(request)
        return _json({"since": since, "until": until, "queues": {
            path: series.read(since, until) for path, series in sorted(self.dashboard.recorder.queues.items())},
            "preemptions": self._queue_marks(since, until, hide_jobs=self._own_only(request))})

    def _queue_marks(self, since: float, until: float, hide_jobs: bool) -> list[dict[str, Any]]:
        """Preemptions in the range, with both queues (jobs still in memory; "" for one gone);
        job ids only for callers who may see every job."""
        def queue(job_id: str) -> str:
            job = self.state.jobs.get(job_id)
            return job.spec.queue if job is not None else ""
        marks = [{"at": m.at, "job_id": m.task_id.rpartition(".")[0], "by_job": m.by_job,
                  "victim_queue": queue(m.task_id.rpartition(".")[0]), "preemptor_queue": queue(m.by_job)}
                 for m in self.dashboard.recorder.preemptions if since <= m.at <= until]
        return [{**m, "job_id": "", "by_job": ""} for m in marks] if hide_jobs else marks

    async def cluster_usage(self, request: web.Request) -> web.Response:
        await self.dashboard.drained()
        since, until = time_range(request)
        return _json({"since": since, "until": until, "series": self.dashboard.recorder.cluster.read(since, until)})


    async def usage_report(self, request: web.Request) -> web.Response:
        """The usage ledger's sums over [since, until) by user, queue or job (`tcl report -o json`'s
        lines); a user's own rows, an admin's all (master/ledger.py)."""
        ledger = getattr(self.service, "ledger", None)
        if ledger is None:
            raise Unavailable("the usage ledger cannot be read on this master (see its log)")
        now = time.time()
        until = number(request.query, "until", now, TIMES)
        since = number(request.query, "since", until - 30 * 86400, TIMES)
        by = request.query.get("by", "user")
        report = await ledger.report(request[CALLER], since, until, by)
        return _json({"since": report.since, "until": report.until, "by": report.by, "own_only": report.own_only,
                      "lines": [{by: line.key, "cpu_hours": line.cpu_hours, "gpu_hours": line.gpu_hours,
                                 "jobs": line.jobs, "attempts": line.attempts, "failures": line.failures,
                                 "wall_hours": line.wall_hours} for line in report.lines]})


def _job_state(text: str) -> JobState:
    try:
        return JobState(text.upper())
    except ValueError:
        raise InvalidArgument("state", f"{text[:40]!r} is not one of "
                                       f"{', '.join(s.value.lower() for s in JobState)}") from None


def _usage_now(usage: Any) -> dict[str, float] | None:
    if usage is None:
        return None
    return {"cpu_rate": usage.cpu_rate, "memory_working_set_bytes": usage.working_set_bytes}


def task_usage_doc(task: Task, record: TaskRecord | None, since: float, until: float,
                   fields: tuple[str, ...] | None = None) -> dict[str, Any]:
    series: Series | None = record.series if record else None
    return {
        "id": task.id, "index": task.index, "node": task.node or (record.node if record else ""),
        "state": task.state.value, "reason": task.reason, "exit_code": task.exit_code,
        "series": series.read(since, until, fields) if series else {
            "step_s": 0, "t": [], **{f: [] for f in fields or TASK.fields}},
        "ooms": [{"at": at, "at_text": timestamp(at), "kills": kills, "node": node}
                 for at, kills, node in (record.ooms if record else [])],
        "memory_peak_bytes": max(record.peak if record else 0, task.usage.memory_peak_bytes),
        # its GPUs' series (GPU schema: mean utilization %, memory used and total, devices),
        # null where NVML never reported (no GPUs, declared devices)
        "gpu": record.gpu.read(since, until, GPU_FIELDS if fields else None)
        if record is not None and record.gpu is not None else None,
    }


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Domain errors -> HTTP statuses, as one table does for gRPC."""
    try:
        return await handler(request)
    except NotFound as error:
        return web.json_response({"error": str(error)}, status=404)
    except Unauthenticated as error:
        return web.json_response({"error": str(error)}, status=401)
    except PermissionDenied as error:
        return web.json_response({"error": str(error)}, status=403)
    except (InvalidArgument, ValueError) as error:
        return web.json_response({"error": str(error)}, status=400)
    except ResourceExhausted as error:
        return web.json_response({"error": str(error)}, status=429)
    except TclusterError as error:
        return web.json_response({"error": str(error)}, status=503)


__all__ = ["Api", "errors_middleware", "resources_json"]
