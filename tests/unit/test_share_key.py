"""share_key is round(value, 12), value for value, on every kind of float the policies
make: shares, products of factors and shares, values a hair from a rounding half, huge,
tiny, negative, infinite and NaN."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings, strategies as st

from tcluster.scheduler.fairshare import share_key


def _same(value: float) -> bool:
    want, got = round(value, 12), share_key(value)
    if math.isnan(want):
        return math.isnan(got)
    return got == want


def _near_halves(rng: random.Random, count: int) -> list[float]:
    """(n + 1/2) / 10**12 and the floats a few ulps either side: where y's error could
    move the rounding, so the fast path must hand over to round()."""
    values = []
    for _ in range(count):
        n = rng.choice([rng.randrange(10**3), rng.randrange(10**9), rng.randrange(10**14)])
        half = (n + 0.5) / 1e12
        for steps in range(-4, 5):
            value = half
            for _ in range(abs(steps)):
                value = math.nextafter(value, math.inf if steps > 0 else -math.inf)
            values.extend((value, -value))
    return values


def test_share_key_is_round_12_a_hair_from_every_half() -> None:
    rng = random.Random(7)
    misses = [v for v in _near_halves(rng, 3000) if not _same(v)]
    assert not misses, misses[:5]


def test_share_key_is_round_12_on_shares_and_their_products() -> None:
    rng = random.Random(11)
    values = []
    for _ in range(50_000):
        running, mu, weight = rng.randrange(0, 5000), rng.random(), rng.choice([0.3, 0.5, 1.0, 2.0, 3.0])
        share = running * mu / weight
        factor = rng.random() * rng.choice([0.01, 1.0, 7.0, 300.0])
        values.extend((share, factor * share, rng.uniform(0, 1e-9), rng.uniform(-5, 5)))
    misses = [v for v in values if not _same(v)]
    assert not misses, misses[:5]


def test_share_key_at_the_edges_of_its_range() -> None:
    edges = [0.0, -0.0, 5e-13, -5e-13, 1.5e-12, 2.5e-12, 999.9999999999995, 1e3, 1e15 / 1e12,
             math.nextafter(1e3, 0), 1e4, 1e6, 1e20, -1e20, 5e-324, 1e-300, math.inf, -math.inf, math.nan,
             2.0 ** 40, 2.0 ** 52 / 1e12, 0.1 + 0.2, 2 / 3 * 0.3, 0.2]
    misses = [v for v in edges if not _same(v)]
    assert not misses, misses
    assert share_key(2 / 3 * 0.3) == share_key(0.2)   # the point of rounding: equal shares tie


@settings(max_examples=3000, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_share_key_is_round_12_on_any_float(value: float) -> None:
    assert _same(value)


@settings(max_examples=2000, deadline=None)
@given(st.integers(-10**15, 10**15), st.integers(-8, 8))
def test_share_key_is_round_12_around_any_half(n: int, steps: int) -> None:
    value = (n + 0.5) / 1e12
    for _ in range(abs(steps)):
        value = math.nextafter(value, math.inf if steps > 0 else -math.inf)
    assert _same(value)
