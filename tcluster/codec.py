"""The one codec for a job spec as plain data (JSON-ready dicts): the master's store and
the agent's launch record both use it, and `wire.spec_to_pb/spec_from_pb` map the same
fields to protobuf. Both read the field table (tcluster/specfields.py): a field added to
JobSpec is carried everywhere by its kind, and a round-trip property test covers them all.
Records keep the dataclass's field order, as they always have."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from tcluster.model import Job, JobSpec, TaskUsage
from tcluster.resources import Resources
from tcluster.specfields import BY_NAME, Carrier


def resources_to_dict(r: Resources) -> dict[str, float]:
    return r.as_dict()


def resources_from_dict(data: dict[str, Any]) -> Resources:
    return Resources.of({str(k): float(v) for k, v in data.items()})


def spec_to_dict(spec: JobSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(JobSpec):
        value, entry = getattr(spec, f.name), BY_NAME[f.name]
        if entry.stored_when_set and value == f.default:
            continue
        out[f.name] = _TO_DICT.carry(entry.kind, value)
    return out


def spec_from_dict(data: dict[str, Any]) -> JobSpec:
    """Fields missing from older records take their defaults; unknown ones are refused."""
    unknown = set(data) - set(BY_NAME)
    if unknown:
        raise ValueError(f"unknown job spec fields: {', '.join(sorted(unknown))}")
    return JobSpec(**{name: _FROM_DICT.carry(BY_NAME[name].kind, value) for name, value in data.items()})


_TO_DICT = Carrier(resources=resources_to_dict, pairs=lambda pairs: [list(pair) for pair in pairs], sequence=list)
_FROM_DICT = Carrier(resources=resources_from_dict, pairs=lambda pairs: tuple((str(k), str(v)) for k, v in pairs),
                     sequence=lambda items: tuple(str(item) for item in items))


def spec_to_json(spec: JobSpec) -> str:
    return json.dumps(spec_to_dict(spec), separators=(",", ":"))


def spec_from_json(text: str) -> JobSpec:
    return spec_from_dict(json.loads(text))


def usage_to_json(usage: TaskUsage) -> str:
    return json.dumps({f.name: getattr(usage, f.name) for f in fields(TaskUsage)}, separators=(",", ":"))


def usage_from_json(text: str) -> TaskUsage:
    data = json.loads(text)
    known = {f.name for f in fields(TaskUsage)}
    return TaskUsage(**{k: v for k, v in data.items() if k in known})


def job_extra_to_json(job: Job) -> str:
    """A job's batch bookkeeping (array ranges, throttle, dependency release) as the stores
    keep it: one JSON text, "" when all are defaults (most jobs)."""
    extra: dict[str, object] = {}
    if job.unplaced:
        extra["unplaced"] = job.unplaced.text()
    if job.skipped:
        extra["skipped"] = job.skipped.text()
    if job.throttle:
        extra["throttle"] = job.throttle
    if job.released:
        extra["released"] = True
    if job.reason:
        extra["reason"] = job.reason
    return json.dumps(extra, separators=(",", ":")) if extra else ""


def with_job_extra(job: Job, text: str | None) -> Job:
    if not text:
        return job
    from dataclasses import replace

    from tcluster.arrays import index_set_from_text
    extra = json.loads(text)
    return replace(job, unplaced=index_set_from_text(extra.get("unplaced", "")),
                   skipped=index_set_from_text(extra.get("skipped", "")), throttle=int(extra.get("throttle", 0)),
                   released=bool(extra.get("released", False)), reason=str(extra.get("reason", "")))
