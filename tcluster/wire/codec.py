"""The one codec for a job spec as plain data (JSON-ready dicts): the master's store and
the agent's launch record both use it, and `wire.spec_to_pb/spec_from_pb` map the same
fields to protobuf. Both read the field table (tcluster/domain/specfields.py): a field added to
JobSpec is carried everywhere by its kind, and a round-trip property test covers them all.
Records keep the dataclass's field order, as they always have."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from tcluster.domain.bounds import MAX_RECORD_BYTES
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import Job, JobSpec, TaskUsage, spec_size
from tcluster.domain.resources import Resources
from tcluster.domain.specfields import BY_NAME, Carrier


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
    if job.held_by:
        extra["held_by"] = job.held_by
    return json.dumps(extra, separators=(",", ":")) if extra else ""


def with_job_extra(job: Job, text: str | None) -> Job:
    if not text:
        return job
    from dataclasses import replace

    from tcluster.domain.arrays import index_set_from_text
    extra = json.loads(text)
    return replace(job, unplaced=index_set_from_text(extra.get("unplaced", "")),
                   skipped=index_set_from_text(extra.get("skipped", "")), throttle=int(extra.get("throttle", 0)),
                   released=bool(extra.get("released", False)), reason=str(extra.get("reason", "")),
                   held_by=str(extra.get("held_by", "")))


def check_spec(spec: JobSpec) -> None:
    """The one check of a spec: its fields (JobSpec.validate), then the size of the record a
    store keeps of it. The master runs it on every submit; `tcl submit` runs it early."""
    spec.validate()
    check_record_size(spec)


def _mb(size: int) -> str:
    return f"{size / 1e6:.2f} MB"


def record_size_bound(spec: JobSpec) -> int:
    """An upper bound of the spec's JSON size, without encoding it: 6 bytes per string
    byte at most, plus quotes and commas per string and the fixed fields."""
    strings = len(spec.command) + 2 * len(spec.env) + 2 * len(spec.labels) + len(spec.constraints) + 8
    kinds = sum(6 * len(kind.encode("utf-8", "surrogatepass")) + 32 for kind in spec.resources.as_dict())
    return 6 * spec_size(spec) + 8 * strings + kinds + 4096


def check_record_size(spec: JobSpec, limit: int = MAX_RECORD_BYTES) -> None:
    """Refuses a spec whose stored record would exceed `limit`, naming the field that takes most."""
    if record_size_bound(spec) <= limit:
        return                                  # nearly every spec: no need to encode it
    data = spec_to_dict(spec)
    total = len(json.dumps(data, separators=(",", ":")).encode())
    if total <= limit:
        return
    sizes = {name: len(json.dumps(value, separators=(",", ":")).encode()) for name, value in data.items()}
    field = max(sizes, key=lambda name: sizes[name])
    raise InvalidArgument(field, f"encodes to {_mb(sizes[field])} as stored (the job record to {_mb(total)}: quotes "
                                 "and backslashes take 2 bytes, control and non-ASCII characters up to 6); the store "
                                 f"takes at most {_mb(limit)} per job record")
