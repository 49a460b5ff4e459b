from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.resources import Resources, parse_resource_string, resources_from_mapping
from tcluster.domain.units import format_bytes, parse_bits, parse_bytes, parse_cpu


@pytest.mark.parametrize("text,expected", [
    ("512Mi", 512 * 2**20), ("0.5GB", 500_000_000), ("0.5G", 2**29), ("1Gi", 2**30),
    ("1024", 1024), ("64 MiB", 64 * 2**20), ("2k", 2048), ("2kB", 2000), ("1e3", 1000), (4096, 4096), ("0", 0),
])
def test_parse_bytes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text,fragment", [
    ("-1Gi", "cannot parse"), ("lots", "cannot parse"), ("5 parsecs", "unknown size unit"),
    ("nan", "cannot parse"), (float("nan"), "finite"), (-3, "finite"), ("", "cannot parse"), (True, "not a size"),
])
def test_parse_bytes_refuses(text: object, fragment: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        parse_bytes(text, "--mem")  # type: ignore[arg-type]
    assert info.value.field == "--mem" and fragment in str(info.value)


@pytest.mark.parametrize("text,expected", [("0.5", 0.5), ("2", 2.0), ("500m", 0.5), (1, 1.0)])
def test_parse_cpu(text: str, expected: float) -> None:
    assert parse_cpu(text) == expected


@pytest.mark.parametrize("bad", ["-0.5", "two", "1x", float("inf"), float("nan")])
def test_parse_cpu_refuses(bad: object) -> None:
    with pytest.raises(InvalidArgument):
        parse_cpu(bad)  # type: ignore[arg-type]


def test_parse_bits() -> None:
    assert parse_bits("10Mbit") == 10_000_000 and parse_bits("1gbit") == 1e9


@pytest.mark.parametrize("text,expected", [
    ("cpu_num=0.5; memory=0.5GB", Resources(0.5, 500_000_000)),
    ("cpu=2, mem=1Gi", Resources(2.0, 2**30)),
    ("memory=256Mi", Resources(0.0, 256 * 2**20)),
    ("cpu=1; net=10Mbit", Resources(1.0, 0, (("net", 1e7),))),
])
def test_paper_resource_form(text: str, expected: Resources) -> None:
    assert parse_resource_string(text) == expected


@pytest.mark.parametrize("bad", ["", "cpu", "cpu=", "=1", "cpu=1;memory=-1", "GPU Count=1"])
def test_paper_resource_form_refuses(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_resource_string(bad)


def test_resource_arithmetic_and_fit() -> None:
    node = Resources(4, 8 * 2**30)
    task = Resources(1.5, 3 * 2**30)
    assert task.fits_in(node) and not task.times(3).fits_in(node)
    assert (node - task - task) == Resources(1, 2 * 2**30)
    assert task.times(3).shortfall(node) == ["cpu", "memory"]
    assert Resources(0.1).__add__(Resources(0.2)).fits_in(Resources(0.3))  # float slack
    assert task.dominant_share(node) == pytest.approx(3 / 8)
    assert resources_from_mapping({"cpus": "500m", "memory": "1Gi"}) == Resources(0.5, 2**30)


def test_empty_or_negative_requests_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="empty"):
        Resources().validate_request()
    with pytest.raises(InvalidArgument, match="resources.cpu"):
        Resources(-1.0, 10).validate_request()
    with pytest.raises(InvalidArgument, match="resources.cpu"):
        Resources(math.nan, 10).validate_request()


@given(st.integers(min_value=0, max_value=2**50))
def test_format_then_parse_bytes_is_close(n: int) -> None:
    assert parse_bytes(format_bytes(n)) == pytest.approx(n, rel=0.05, abs=1)


@given(st.lists(st.tuples(st.floats(0, 64), st.integers(0, 2**40)), min_size=1, max_size=20))
def test_sum_then_subtract_is_identity(pairs: list[tuple[float, int]]) -> None:
    parts = [Resources(c, m) for c, m in pairs]
    total = sum(parts, Resources())
    for part in parts:
        assert part.fits_in(total)
    left = total
    for part in parts:
        left = left - part
    assert abs(left.cpu) < 1e-6 and left.memory == 0
