"""A spec's stored record is bounded as JSON, not as raw strings: quotes, backslashes,
control and non-ASCII characters take more room encoded. Both stores take the same specs;
the error names the field that takes most, its size and the limit, and quotes nothing."""

from __future__ import annotations

import pytest

from tcluster.domain.bounds import MAX_RECORD_BYTES, MAX_SPEC_BYTES
from tcluster.domain.errors import InvalidArgument
from tcluster.domain.model import JobSpec
from tcluster.domain.resources import Resources
from tcluster.wire.codec import check_record_size, check_spec, record_size_bound, spec_to_json


def spec(**fields: object) -> JobSpec:
    command = fields.pop("command", ("true",))
    return JobSpec(command, Resources(1, 2**20), **fields)   # type: ignore[arg-type]


@pytest.mark.parametrize("fields, refused_field", [
    ({"env": (("BLOB", '"' * 900_000),)}, "env"),          # the review's: 0.9 MB of quotes, 1.8 MB as JSON
    ({"env": (("BLOB", "\x01" * 300_000),)}, "env"),        # control characters: 6 bytes each
    ({"env": (("BLOB", "é" * 300_000),)}, "env"),           # 600 kB of UTF-8, 1.8 MB escaped
    ({"command": ("echo", "\\" * 800_000)}, "command"),
    ({"labels": (("k", '"' * 250),) * 64, "env": (("E", "\\" * 700_000),)}, "env"),
    ({"env": (("BLOB", "x" * 1_000_000),)}, None),          # plain ASCII within MAX_SPEC_BYTES
    ({"env": (("BLOB", '"' * 690_000),)}, None),            # 1.38 MB as JSON: just within
    ({}, None),
])
def test_a_spec_is_bounded_by_its_encoded_size(fields: dict, refused_field: str | None) -> None:
    s = spec(**fields)
    encoded = len(spec_to_json(s).encode())
    assert encoded <= record_size_bound(s)                 # the shortcut never lets a large one past
    if refused_field is None:
        check_record_size(s)
        check_spec(s)
        assert encoded <= MAX_RECORD_BYTES
        return
    s.validate()                                           # the fields are fine: the record is not
    with pytest.raises(InvalidArgument) as info:
        check_spec(s)
    error = info.value
    assert error.field == refused_field and encoded > MAX_RECORD_BYTES
    assert "MB" in str(error) and "at most 1.40 MB per job record" in str(error) and len(str(error)) < 300


def test_the_shortcut_bound_holds_for_the_worst_characters() -> None:
    for char in ['"', "\\", "\x00", "\x1f", "é", "€", "\U0001f600", "\ud800", "a"]:
        s = spec(env=(("K", char * 1000),), command=("x",) * 100, labels=(("l", char * 10),))
        assert len(spec_to_json(s).encode()) <= record_size_bound(s)


def test_the_record_bound_sits_below_etcds_request_limit_and_above_the_strings_bound() -> None:
    assert MAX_SPEC_BYTES < MAX_RECORD_BYTES < 1_572_864 - 16_384
