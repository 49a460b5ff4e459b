"""Who reads a job's secrets (authz.sees_secrets), which fields are hidden from the others
(the field table's `shown`) and how a hidden value looks (keys kept, one marker)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tcluster.domain.model import JobSpec
from tcluster.views.redaction import REDACTED, hidden_fields, redact_spec
from tcluster.domain.resources import Resources
from tcluster.security.authz import ANONYMOUS, Caller, sees_secrets
from tcluster.domain.specfields import SPEC_FIELDS, Kind, Shown
from tcluster.views.render import job_json
from tcluster.domain.model import Job, JobState

ALICE = Caller("alice", False, "nobody", ("*",))
BOB = Caller("bob", False, "nobody", ())
ADMIN = Caller("root", True, "", ("*",))
SPEC = JobSpec(command=("python3", "train.py", "--token=t0ps3cret"), resources=Resources(cpu=1, memory=2**20),
               env=(("AWS_SECRET_ACCESS_KEY", "alice-very-secret"), ("MODE", "fast")), owner="alice", name="train")


@pytest.mark.parametrize("caller, owner, sees", [
    (ALICE, "alice", True), (BOB, "alice", False), (ADMIN, "alice", True), (ANONYMOUS, "alice", True),
    (Caller("", False, ""), "", False),           # an unnamed caller owns nothing, not even an ownerless job
])
def test_only_the_owner_and_admins_see_secrets(caller: Caller, owner: str, sees: bool) -> None:
    assert sees_secrets(caller, owner) is sees


@pytest.mark.parametrize("sees, queue_hides, hidden", [
    (True, False, ()), (True, True, ()),
    (False, False, ("env", "script")),            # default: command shown, env and a job script hidden
    (False, True, ("command", "env", "script")),  # a queue with hide_command: true
])
def test_which_fields_are_hidden(sees: bool, queue_hides: bool, hidden: tuple[str, ...]) -> None:
    assert tuple(f.name for f in hidden_fields(sees, queue_hides)) == hidden


def test_a_redacted_spec_keeps_its_keys_and_shapes() -> None:
    shown = redact_spec(SPEC, hidden_fields(False, True))
    assert shown.env == (("AWS_SECRET_ACCESS_KEY", REDACTED), ("MODE", REDACTED))
    assert shown.command == (REDACTED,)
    assert (shown.name, shown.owner, shown.resources) == (SPEC.name, SPEC.owner, SPEC.resources)
    assert redact_spec(SPEC, hidden_fields(True, True)) is SPEC
    empty = redact_spec(JobSpec(command=(), resources=SPEC.resources), hidden_fields(False, True))
    assert (empty.env, empty.command) == ((), ())    # nothing set: nothing to hide


def test_the_json_view_of_a_redacted_job_has_the_same_keys() -> None:
    job = Job("j1", SPEC, 1.0, JobState.PENDING)
    plain, redacted = job_json(job, []), job_json(Job("j1", redact_spec(SPEC, hidden_fields(False, False)),
                                                      1.0, JobState.PENDING), [])
    assert list(plain) == list(redacted)
    assert redacted["env"] == {"AWS_SECRET_ACCESS_KEY": REDACTED, "MODE": REDACTED}
    assert redacted["command"] == list(SPEC.command)


def test_a_job_script_is_the_owner_s() -> None:
    scripted = redact_spec(replace(SPEC, script="#!/bin/sh\nexport TOKEN=s3cret\n"), hidden_fields(False, False))
    assert scripted.script == REDACTED
    assert redact_spec(SPEC, hidden_fields(False, False)).script == ""       # none: nothing to hide


def test_every_owner_only_field_has_a_kind_that_can_be_redacted() -> None:
    for entry in SPEC_FIELDS:
        if entry.shown is not Shown.ALL:
            assert entry.kind in (Kind.PAIRS, Kind.ARGV, Kind.LIST, Kind.TEXT), entry.name
