"""The one codec for a job spec as plain data (JSON-ready dicts): the master's store and
the agent's launch record both use it, and `wire.spec_to_pb/spec_from_pb` map the same
fields to protobuf. A field added to JobSpec is carried everywhere by construction:
every dataclass field goes through here, and a round-trip property test covers them all."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from tcluster.model import JobSpec, TaskUsage
from tcluster.resources import Resources

_PAIRS = ("env", "labels")          # tuples of (key, value)
_TUPLES = ("command", "constraints")
# Fields added since the first release are written only when set: an older master (a
# rolling upgrade of HA masters, or a rollback) refuses unknown fields, and most specs
# never use them. Add each new JobSpec field here.
_WRITTEN_WHEN_SET = ("request_id",)


def resources_to_dict(r: Resources) -> dict[str, float]:
    return r.as_dict()


def resources_from_dict(data: dict[str, Any]) -> Resources:
    return Resources.of({str(k): float(v) for k, v in data.items()})


def spec_to_dict(spec: JobSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(JobSpec):
        value = getattr(spec, f.name)
        if f.name in _WRITTEN_WHEN_SET and value == f.default:
            continue
        if f.name == "resources":
            value = resources_to_dict(value)
        elif f.name in _PAIRS:
            value = [list(pair) for pair in value]
        elif f.name in _TUPLES:
            value = list(value)
        out[f.name] = value
    return out


def spec_from_dict(data: dict[str, Any]) -> JobSpec:
    """Fields missing from older records take their defaults; unknown ones are refused."""
    known = {f.name for f in fields(JobSpec)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown job spec fields: {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for name, value in data.items():
        if name == "resources":
            value = resources_from_dict(value)
        elif name in _PAIRS:
            value = tuple((str(k), str(v)) for k, v in value)
        elif name in _TUPLES:
            value = tuple(str(v) for v in value)
        values[name] = value
    return JobSpec(**values)


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
