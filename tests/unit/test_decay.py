"""Usage that decays: the math as tables, the fair-share weights, the record's codec,
and the simulator's property that with a half-life two users' usage evens out."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tcluster.daemonkit.configfile import load_args
from tcluster.domain.resources import Resources
from tcluster.master.app.main import build_parser, settings_from_args
from tcluster.scheduler.decay import DecayLedger, accrue, decay_factor, decode, encode, ledger_keys, usage_weights
from tcluster.scheduler.queues import parse_queue_text
from tcluster.sim.engine import simulate
from tcluster.sim.scenario import parse_scenario
from tcluster.scheduler.yamlsrc import YamlConfigError

CAPACITY = Resources(4, 16 * 2**30)


@pytest.mark.parametrize("dt, half_life, factor", [(0, 60, 1.0), (60, 60, 0.5), (120, 60, 0.25), (30, 60, 2 ** -0.5),
                                                   (-5, 60, 1.0)])
def test_decay_factor(dt: float, half_life: float, factor: float) -> None:
    assert decay_factor(dt, half_life) == pytest.approx(factor)


@pytest.mark.parametrize("held_cpu, dt, before, after", [
    (0, 60, (100.0, 0.0, 0.0), (50.0, 0.0, 0.0)),                 # idle: halves per half-life
    (4, 60, (0.0, 0.0, 0.0), (60 / math.log(2) * 0.5, 0, 0)),      # the whole cluster for one half-life
    (2, 0, (7.0, 1.0, 0.0), (7.0, 1.0, 0.0)),                     # no time: nothing changes
])
def test_accrue_is_the_decayed_integral(held_cpu: float, dt: float, before: tuple[float, ...],
                                        after: tuple[float, ...]) -> None:
    ledger = DecayLedger(1000.0, {"lab": before})
    held = {"lab": Resources(held_cpu)} if held_cpu else {}
    assert accrue(ledger, 1000.0 + dt, held, CAPACITY, 60.0).usage["lab"] == pytest.approx(after)


@given(steps=st.integers(1, 50), share=st.floats(0.01, 1.0))
def test_accruing_often_or_at_once_gives_the_same_usage(steps: int, share: float) -> None:
    held = {"lab": Resources(4 * share)}
    once = accrue(DecayLedger(0.0), 100.0, held, CAPACITY, 30.0)
    often = DecayLedger(0.0)
    for i in range(1, steps + 1):
        often = accrue(often, 100.0 * i / steps, held, CAPACITY, 30.0)
    assert often.dominant("lab") == pytest.approx(once.dominant("lab"), rel=1e-9, abs=1e-9)


def test_the_dominant_kind_counts_and_idle_keys_fade_out() -> None:
    ledger = accrue(DecayLedger(0.0), 10.0, {"lab": Resources(1, 8 * 2**30)}, CAPACITY, 1e9)
    assert ledger.dominant("lab") == pytest.approx(5.0, rel=1e-6)     # memory: half the cluster for 10 s
    assert "lab" not in accrue(ledger, 10.0 + 1000 * 60, {}, CAPACITY, 60.0).usage


def test_keys_cover_each_user_and_every_queue_up_the_tree() -> None:
    tree = parse_queue_text("queues: {ads: {queues: {prod: {}, test: {}}}}", "q.yaml")
    keys = ledger_keys(tree, {("ads.prod", "alice"): Resources(1), ("ads.test", "bob"): Resources(2)})
    assert {k: v.get("cpu") for k, v in keys.items()} == {"ads.prod/alice": 1, "ads.test/bob": 2, "ads.prod": 1,
                                                           "ads.test": 2, "ads": 3}


def test_the_light_sibling_and_the_light_user_weigh_more() -> None:
    tree = parse_queue_text("queues: {a: {weight: 1}, b: {weight: 1}}", "q.yaml")
    ledger = DecayLedger(0.0, {"a": (30.0, 0, 0), "b": (10.0, 0, 0), "a/alice": (30.0, 0, 0), "a/bob": (0.0, 0, 0.1)})
    adjusted = usage_weights(tree, ledger)
    weights = {c.path: c.weight for c in adjusted.root.children}
    assert weights == {"a": pytest.approx(2 ** -1.5), "b": pytest.approx(2 ** -0.5)}   # U/S = 1.5 and 0.5
    assert adjusted.user_weight("a", "bob") > adjusted.user_weight("a", "alice")
    assert adjusted.guaranteed_share("a") == 0.5 * 2 ** -1.5 / (0.5 * (2 ** -1.5 + 2 ** -0.5))
    assert tree.guaranteed_share("a") == 0.5          # the file's tree keeps its weights
    assert usage_weights(tree, DecayLedger(0.0)) is tree


@pytest.mark.parametrize("raw", [None, b"", b"{", b'{"at": 1}', b'{"at": "x", "usage": {}}'])
def test_an_unreadable_record_starts_from_no_usage(raw: bytes | None) -> None:
    assert decode(raw) == DecayLedger()


def test_the_record_round_trips() -> None:
    ledger = DecayLedger(12.5, {"lab": (1.0, 2.0, 0.0), "lab/alice": (0.5, 0.0, 3.0)})
    assert decode(encode(ledger)) == ledger


@pytest.mark.parametrize("value, message", [("0s", "must be a duration > 0"), ("soon", "cannot parse")])
def test_a_bad_half_life_in_a_scenario_names_the_key(value: str, message: str) -> None:
    with pytest.raises(YamlConfigError, match=f"usage_half_life: .*{message}"):
        parse_scenario(f"usage_half_life: {value}\n" + scenario_text(5)[1:], "s.yaml")


def scenario_text(duration: int, half_life: str = "") -> str:
    """Alice alone on 4 slots for 100 s, then alice and bob both with plenty of work."""
    top = f"usage_half_life: {half_life}\n" if half_life else ""
    many = 2000 // duration
    return f"""
{top}nodes: [{{name: n1, capacity: {{cpu: 4, memory: 16Gi}}}}]
queues: {{lab: {{}}}}
jobs:
  - {{name: early, user: alice, queue: lab, submit: 0, tasks: {400 // duration}, resources: {{cpu: 1}}, duration: {duration}}}
  - {{name: late, user: alice, queue: lab, submit: 100, tasks: {many}, resources: {{cpu: 1}}, duration: {duration}}}
  - {{name: bob, user: bob, queue: lab, submit: 100, tasks: {many}, resources: {{cpu: 1}}, duration: {duration}}}
"""


def usage_by_user(duration: int, half_life_s: float, ordering: bool, until: float) -> dict[str, tuple[float, float]]:
    """user -> (task-seconds, task-seconds decayed to `until` with the half-life), from the runs."""
    text = scenario_text(duration, f"{half_life_s}s" if ordering else "")
    run = simulate(parse_scenario(text, "s.yaml"), "mch", "first-fit", until=until)
    out: dict[str, tuple[float, float]] = {}
    for track in run.tracks:
        plain, decayed = out.get(track.spec.user, (0.0, 0.0))
        for r in track.runs:
            end = min(r.end if r.end is not None else until, until)
            plain += end - r.start
            tau = half_life_s / math.log(2)   # integral of 2^-(until - t)/h over [start, end]
            decayed += tau * (math.exp(-(until - end) / tau) - math.exp(-(until - r.start) / tau))
        out[track.spec.user] = (plain, decayed)
    return out


def gaps(usage: dict[str, tuple[float, float]]) -> tuple[float, float]:
    (a, ad), (b, bd) = usage["alice"], usage["bob"]
    return abs(a - b), abs(ad - bd) / (ad + bd)


@settings(max_examples=12, deadline=None)
@given(duration=st.integers(2, 9), half_life_s=st.integers(30, 300), until=st.integers(250, 500))
def test_with_a_half_life_two_users_usage_evens_out(duration: int, half_life_s: int, until: int) -> None:
    """Bob arrives after alice ran alone: with decay ordering he catches up, so both the
    integrated and the decayed usage gap end no larger than without, and the integrated
    gap shrinks from the 400 task-seconds alice had when he came."""
    plain, plain_decayed = gaps(usage_by_user(duration, half_life_s, False, until))
    ordered, ordered_decayed = gaps(usage_by_user(duration, half_life_s, True, until))
    assert ordered <= plain and ordered_decayed <= plain_decayed + 1e-9
    assert ordered < 400


def test_the_light_user_catches_up_only_with_a_half_life() -> None:
    plain, _ = gaps(usage_by_user(5, 60, False, 400))
    ordered, _ = gaps(usage_by_user(5, 60, True, 400))
    assert plain == 400 and ordered <= 0.9 * plain


@pytest.mark.parametrize("toml, flags, half_life_s", [
    ("", [], 0.0),                                          # default: off
    ('usage_half_life = "7d"\n', [], 7 * 86400.0),
    ('usage_half_life = "7d"\n', ["--usage-half-life", "2h"], 7200.0),   # the flag wins
    ('usage_half_life = "off"\n', [], 0.0),
])
def test_usage_half_life_from_the_flag_and_the_toml_key(tmp_path: Path, toml: str, flags: list[str],
                                                        half_life_s: float) -> None:
    conf = tmp_path / "master.toml"
    conf.write_text(toml)
    loaded = load_args(build_parser(), ["--config", str(conf), *flags])
    assert settings_from_args(loaded.args).usage_half_life_s == half_life_s
