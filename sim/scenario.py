"""Scenario files for `tcl sim`.

    nodes:                       # named nodes, or groups of identical ones
      - {name: big, capacity: {cpu: 64, memory: 256Gi}, labels: {disk: ssd}}
      - {count: 10, name_prefix: n, capacity: {cpu: 20, memory: 20Gi}}
    queues:                      # the same mapping as under `queues:` in a --queues file
      ads: {weight: 60, queues: {prod: {weight: 90}, test: {weight: 10}}}
    jobs:
      - {name: a, queue: ads.prod, submit: 0, tasks: 100, resources: {cpu: 1, memory: 2Gi}, duration: 30}

A scenario may give a `workload:` (arrival processes over job classes, see
sim/workload.py) instead of, or beside, `jobs`.

`duration` is seconds per task, or null to run until the end. Optional per job:
`weight` (default 1), `constraints` (as `tcl submit --constraint`) and `user` (whom it
counts for in a leaf that shares by users; without one a job is a user of its own). Batch work
(sim/batch.py), each as the master takes it: `array: 0-999%50` (instead of `tasks`:
the tasks are these indexes, at most 50 running at once), `dependency: afterok:prep`
(Slurm's form naming scenario jobs, `?` for or; a cycle is refused), `keep_unmet: true`,
`gang: true` (all tasks in one round or none) and `time_limit: 2h` (a task still running
then ends FAILED). Optional at the
top: `reserve_after_s`, `backfill` (true, the default, as `tcl-master --backfill`: a
job whose time limit ends before a reservation's estimate may start on its room; false
as `--no-backfill`), `usage_half_life: 2h` (past usage decays and orders siblings, as
`tcl-master --usage-half-life`; default none), and `preemption: {after_s, grace_s,
min_runtime_s, max_per_round}` (the knobs of `tcl-master --preempt-*`, same defaults; whether a run
preempts is the command line's choice: `tcl sim --preemption`). Every error names the line and the path, e.g.
`scenario.yaml:14: jobs[3].resources.cpu: ...`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import Any, Iterable

from tcluster.domain.constraints import parse_constraints
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import DEFAULT_QUEUE
from tcluster.domain.resources import Resources, resources_from_mapping
from tcluster.domain.units import parse_duration
from tcluster.scheduler.preemption import PreemptionSettings
from tcluster.scheduler.queues import QueueTree, default_tree, queues_from_located
from tcluster.scheduler.reasons import never_fits_reason
from tcluster.scheduler.reservations import DEFAULT_RESERVE_AFTER_S
from tcluster.scheduler.views import NodeSpec
from tcluster.scheduler.yamlsrc import YamlConfigError, Located, Path, format_path, load_located, read_config_file
from tcluster.sim.batch import BATCH_KEYS, batch_spec, check_dependencies
from tcluster.sim.jobs import SimJob
from tcluster.sim.workload import Workload, parse_workload

_TOP_KEYS = ("nodes", "queues", "jobs", "reserve_after_s", "workload", "preemption", "backfill",
             "usage_half_life")
_PREEMPT_KEYS = ("after_s", "grace_s", "min_runtime_s", "max_per_round")
_NODE_KEYS = ("name", "capacity", "labels", "count", "name_prefix")
_JOB_KEYS = ("name", "queue", "submit", "tasks", "resources", "duration", "weight", "constraints", "user",
             *BATCH_KEYS)


@dataclass(frozen=True)
class Scenario:
    nodes: tuple[NodeSpec, ...]
    queues: QueueTree
    jobs: tuple[SimJob, ...]
    reserve_after_s: float = DEFAULT_RESERVE_AFTER_S
    source: str = ""
    workload: Workload | None = None     # generated arrivals (sim/workload.py) instead of `jobs`
    preemption: PreemptionSettings = PreemptionSettings()   # the knobs, used when the run preempts
    backfill: bool = True                # short jobs may start on a reservation's room (scheduler/backfill.py)
    usage_half_life_s: float = 0.0       # decayed usage orders siblings (scheduler/decay.py); 0: off


def load_scenario(path: FsPath | str) -> Scenario:
    return parse_scenario(read_config_file(path, "the scenario"), str(path))


def parse_scenario(text: str, source: str) -> Scenario:
    doc = load_located(text, source)
    if not isinstance(doc.value, dict):
        raise doc.error((), "a scenario is a mapping with nodes, queues and jobs")
    for key in doc.value:
        if key not in _TOP_KEYS:
            raise doc.error((key,), f"unknown key; a scenario has {', '.join(_TOP_KEYS)}")
    nodes = _nodes(doc)
    queues = QueueTree(queues_from_located(doc, ("queues",)), source) if "queues" in doc.value else default_tree()
    workload = None
    if "workload" in doc.value:
        kinds = tuple(dict.fromkeys(k for n in nodes for k in n.capacity.as_dict()))
        workload = parse_workload(doc, kinds)
    jobs = _jobs(doc, queues, nodes) if workload is None or "jobs" in doc.value else ()
    reserve = doc.value.get("reserve_after_s", DEFAULT_RESERVE_AFTER_S)
    backfill = doc.value.get("backfill", True)
    if not isinstance(backfill, bool):
        raise doc.error(("backfill",), f"{backfill!r} must be true or false")
    return Scenario(nodes, queues, jobs, _number(doc, ("reserve_after_s",), reserve, minimum=0.0), source, workload,
                    _preemption(doc), backfill=backfill, usage_half_life_s=_half_life(doc))


def _half_life(doc: Located) -> float:
    value = doc.value.get("usage_half_life")
    if value is None:
        return 0.0
    try:
        seconds = parse_duration(value, "usage_half_life")
    except InvalidArgument as error:
        raise doc.error(("usage_half_life",), str(error).partition(": ")[2] or str(error)) from None
    if seconds <= 0:
        raise doc.error(("usage_half_life",), "must be a duration > 0, e.g. 7d or 2h (leave it out: no decay)")
    return seconds


def _preemption(doc: Located) -> PreemptionSettings:
    if "preemption" not in doc.value:
        return PreemptionSettings()
    path: Path = ("preemption",)
    body = checked_mapping(doc, path, doc.value["preemption"], _PREEMPT_KEYS)
    knobs: dict[str, float] = {k: _number(doc, (*path, k), body[k], minimum=0.0) for k in _PREEMPT_KEYS[:3] if k in body}
    settings = PreemptionSettings(**knobs)
    if "max_per_round" in body:
        count = body["max_per_round"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise doc.error((*path, "max_per_round"), f"{count!r} must be a whole number >= 1")
        settings = PreemptionSettings(**knobs, max_per_round=count)
    return settings


def _list(doc: Located, key: str) -> list[Any]:
    value = doc.value.get(key)
    if not isinstance(value, list) or not value:
        raise doc.error((key,), "must be a non-empty list")
    return value


def checked_mapping(doc: Located, path: Path, value: Any, allowed: Iterable[str]) -> dict[str, Any]:
    """`value` as a mapping whose keys are all in `allowed`; else the error names the key."""
    allowed = tuple(allowed)
    if not isinstance(value, dict):
        raise doc.error(path, f"must be a mapping with {', '.join(allowed)}")
    for key in value:
        if key not in allowed:
            raise doc.error((*path, key), f"unknown key; allowed: {', '.join(allowed)}")
    return value


def _nodes(doc: Located) -> tuple[NodeSpec, ...]:
    nodes: list[NodeSpec] = []
    seen: dict[str, Path] = {}
    for i, raw in enumerate(_list(doc, "nodes")):
        path: Path = ("nodes", i)
        body = checked_mapping(doc, path, raw, _NODE_KEYS)
        capacity = _resources(doc, (*path, "capacity"), body.get("capacity"))
        labels = tuple(sorted((str(k), str(v)) for k, v in _labels(doc, (*path, "labels"), body.get("labels")).items()))
        for name in _node_names(doc, path, body):
            if name in seen:
                raise doc.error(path, f"duplicate node name {name!r} (also {format_path(seen[name])})")
            seen[name] = path
            nodes.append(NodeSpec(name, capacity, labels))
    return tuple(nodes)


def _node_names(doc: Located, path: Path, body: dict[str, Any]) -> list[str]:
    if "count" not in body:
        if "name_prefix" in body or not isinstance(body.get("name"), str) or not body["name"]:
            raise doc.error((*path, "name"), "give a `name`, or `count` and `name_prefix` for a group")
        return [body["name"]]
    count = body["count"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise doc.error((*path, "count"), f"{count!r} must be a whole number >= 1")
    prefix = body.get("name_prefix")
    if not isinstance(prefix, str) or not prefix or "name" in body:
        raise doc.error((*path, "name_prefix"), "a group has `count` and `name_prefix` (and no `name`)")
    width = len(str(count))
    return [f"{prefix}{k:0{width}d}" for k in range(1, count + 1)]


def _labels(doc: Located, path: Path, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise doc.error(path, "must be a mapping of label names to values")
    return value


def _resources(doc: Located, path: Path, value: Any) -> Resources:
    if not isinstance(value, dict) or not value:
        raise doc.error(path, "must be a mapping like {cpu: 2, memory: 4Gi}")
    try:
        return resources_from_mapping(value, format_path(path))
    except InvalidArgument as exc:
        kind = exc.field.rpartition(".")[2] if exc.field != format_path(path) else None
        at = (*path, kind) if kind in value else path
        raise YamlConfigError(doc.source, doc.line(at), (), str(exc)) from None


def _number(doc: Located, path: Path, value: Any, minimum: float, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise doc.error(path, f"{value!r} is not a number")
    if value < minimum or (strict and value == minimum):
        raise doc.error(path, f"{value!r} must be {'>' if strict else '>='} {minimum:g}")
    return float(value)


def _jobs(doc: Located, queues: QueueTree, nodes: tuple[NodeSpec, ...]) -> tuple[SimJob, ...]:
    jobs: list[SimJob] = []
    names: dict[str, int] = {}
    for i, raw in enumerate(_list(doc, "jobs")):
        job = _job(doc, ("jobs", i), checked_mapping(doc, ("jobs", i), raw, _JOB_KEYS), queues, nodes)
        if job.name in names:
            raise doc.error(("jobs", i, "name"), f"duplicate job name {job.name!r} (also jobs[{names[job.name]}])")
        names[job.name] = i
        jobs.append(job)
    check_dependencies(doc, jobs)
    return tuple(jobs)


def _job(doc: Located, path: Path, body: dict[str, Any], queues: QueueTree, nodes: tuple[NodeSpec, ...]) -> SimJob:
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise doc.error((*path, "name"), "every job needs a `name`")
    queue = str(body.get("queue", DEFAULT_QUEUE))
    try:
        queues.check_leaf(queue)
    except InvalidArgument as exc:
        raise doc.error((*path, "queue"), str(exc).removeprefix("queue: ")) from None
    tasks = body.get("tasks", 1)
    if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1:
        raise doc.error((*path, "tasks"), f"{tasks!r} must be a whole number >= 1")
    batch = batch_spec(doc, path, body)
    if batch.indexes:   # an array's tasks are its indexes
        tasks = len(batch.indexes)
    resources = _resources(doc, (*path, "resources"), body.get("resources"))
    reason = never_fits_reason(resources, [(n.name, n.capacity) for n in nodes])
    if reason:   # "resources.memory: each task asks for ..." -> at jobs[i].resources.memory
        where, _, why = reason.partition(": ")
        raise doc.error((*path, *where.split(".")), why)
    duration = body.get("duration")
    return SimJob(
        name, queue, _number(doc, (*path, "submit"), body.get("submit", 0), minimum=0.0), tasks, resources,
        None if duration is None else _number(doc, (*path, "duration"), duration, minimum=0.0, strict=True),
        _number(doc, (*path, "weight"), body.get("weight", 1), minimum=0.0, strict=True),
        _constraints(doc, (*path, "constraints"), body.get("constraints")), batch, _user(doc, path, body),
    )


def _user(doc: Located, path: Path, body: dict[str, Any]) -> str:
    user = body.get("user", "")
    if not isinstance(user, str) or (user and not user.isprintable()) or len(user) > 64:
        raise doc.error((*path, "user"), f"{user!r} must be a user name (1-64 printable characters)")
    return user


def _constraints(doc: Located, path: Path, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(c, str) for c in items):
        raise doc.error(path, "must be a list of strings like [\"rack=r1\"]")
    try:
        parse_constraints(tuple(items))
    except InvalidArgument as exc:
        raise doc.error(path, str(exc)) from None
    return tuple(items)
