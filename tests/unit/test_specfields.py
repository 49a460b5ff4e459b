"""The job spec's one field table agrees with the dataclass and the proto: a field added
to one of them and not to the table fails here, before any codec silently drops it."""

from __future__ import annotations

import argparse
from dataclasses import fields

from tcluster.cli.jobfile import GPUS_KEY, KNOWN_KEYS
from tcluster.cli.submitflags import add_submit_options
from tcluster.domain.model import JobSpec
from tcluster.domain.specfields import SPEC_FIELDS
from tcluster.v1 import jobs_pb2


def test_every_proto_field_has_a_table_entry_and_every_entry_a_proto_field() -> None:
    proto = set(jobs_pb2.JobSpec.DESCRIPTOR.fields_by_name)
    table = {entry.proto for entry in SPEC_FIELDS}
    assert proto - table == set(), "proto JobSpec fields without a table entry (tcluster/domain/specfields.py)"
    assert table - proto == set(), "table entries naming no proto JobSpec field"


def test_the_table_has_one_entry_per_dataclass_field() -> None:
    names = [entry.name for entry in SPEC_FIELDS]
    assert len(names) == len(set(names))
    assert set(names) == {f.name for f in fields(JobSpec)}


def test_keys_and_flags_are_unique() -> None:
    for attribute in ("json", "file_key", "flag"):
        values = [getattr(entry, attribute) for entry in SPEC_FIELDS if getattr(entry, attribute)]
        assert len(values) == len(set(values)), attribute


def test_every_flag_and_file_key_of_the_table_is_offered() -> None:
    parser = argparse.ArgumentParser()
    add_submit_options(parser)
    offered = {name for action in parser._actions for name in action.option_strings}
    assert {entry.flag for entry in SPEC_FIELDS if entry.flag} <= offered
    # `gpus:` is no field of its own: the resource gpu (resources.gpu) under a short key.
    assert set(KNOWN_KEYS) == {entry.file_key for entry in SPEC_FIELDS if entry.file_key} | {GPUS_KEY}
