"""What of a job's spec a caller may read: the values of owner-only fields (the field
table's `shown`, tcluster/domain/specfields.py) are replaced by one fixed marker for everyone but
the job's owner and admins. Pure; the master applies it before a spec leaves (gRPC Get,
List, Submit, Cancel and the dashboard API), because a client cannot be trusted to.

A redacted value keeps its shape and its keys: env stays a map with every key, the
command a list, so `-o json` field names and types never change."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tcluster.domain.model import Job, JobSpec
from tcluster.domain.specfields import SPEC_FIELDS, Kind, SpecField, Shown

REDACTED = "<redacted>"


def hidden_fields(sees_secrets: bool, queue_hides_command: bool) -> tuple[SpecField, ...]:
    """The fields whose values this caller may not read: none for the owner and admins."""
    if sees_secrets:
        return ()
    return tuple(f for f in SPEC_FIELDS
                 if f.shown is Shown.OWNER or (f.shown is Shown.QUEUE and queue_hides_command))


def _redacted(kind: Kind, value: Any) -> Any:
    if not value:
        return value                   # nothing set: nothing to hide, and "unset" stays visible
    if kind is Kind.PAIRS:
        return tuple((key, REDACTED) for key, _ in value)
    if kind.is_sequence:
        return (REDACTED,)             # not even the number of arguments
    if kind is Kind.TEXT:
        return REDACTED
    raise ValueError(f"a {kind.value} field cannot be redacted")   # a table entry no test allowed


def redact_spec(spec: JobSpec, hidden: tuple[SpecField, ...]) -> JobSpec:
    if not hidden:
        return spec
    return replace(spec, **{f.name: _redacted(f.kind, getattr(spec, f.name)) for f in hidden})


def redact_job(job: Job, hidden: tuple[SpecField, ...]) -> Job:
    return replace(job, spec=redact_spec(job.spec, hidden)) if hidden else job
