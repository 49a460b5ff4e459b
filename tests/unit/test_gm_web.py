"""Issue 35: tcl-gm's /metrics and status page (gm/web.py), pure over a snapshot, and the
--http setting."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from tcluster.daemonkit.configfile import ConfigError
from tcluster.federation.gm import GMStats
from tcluster.gm.links import LMLink
from tcluster.gm.settings import GMSettings, parse
from tcluster.gm.web import metrics_text, snapshot, status_page

SAMPLE = re.compile(r'^tcluster_gm_[a-z_]+\{[a-z]+="[^"]*"(,[a-z]+="[^"]*")*\} -?[0-9.]+$')


def daemon() -> SimpleNamespace:
    fresh = LMLink("west", ["10.0.0.1:7070"], connected=True, usable=True, last_state=95.0, addr="10.0.0.1:7070")
    layout = SimpleNamespace(epoch=7, names=("n0", "n1"))
    fresh.layout, fresh.view = layout, SimpleNamespace(free=((1500, 1024), (500, 2048)))   # type: ignore[assignment]
    never = LMLink("east", ["10.0.0.2:7070", "10.0.0.3:7070"])
    stats = GMStats(launches=40, repartitions=3, preemptions=2, internal_inconsistencies=5,
                    external_inconsistencies=1, refused=4)
    s = GMSettings(name="gm0", index=0, lms=[("west", ["10.0.0.1:7070"])], gms=[("gm0", "a:1"), ("gm1", "b:1")],
                   queue_map={"a": "gm0", "b": "gm1"})
    gm = SimpleNamespace(stats=stats, pending=lambda: 6)
    return SimpleNamespace(gm=gm, s=s, links=[fresh, never], unanswered=[1, 2], placer=SimpleNamespace(refused=9))


def test_metrics_carry_gms_lms_view_ages_pending_launches_and_inconsistencies() -> None:
    text = metrics_text(snapshot(daemon(), now=100.0))
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert all(SAMPLE.match(line) for line in samples), [line for line in samples if not SAMPLE.match(line)]
    for line in ('tcluster_gm_federation_gms{gm="gm0"} 2', 'tcluster_gm_pending_tasks{gm="gm0"} 8',
                 'tcluster_gm_unanswered_places{gm="gm0"} 2', 'tcluster_gm_launches_total{gm="gm0"} 40',
                 'tcluster_gm_inconsistencies_total{gm="gm0",kind="internal"} 5',
                 'tcluster_gm_inconsistencies_total{gm="gm0",kind="external"} 1',
                 'tcluster_gm_stale_epochs_total{gm="gm0"} 4', 'tcluster_gm_lm_refusals_total{gm="gm0"} 9',
                 'tcluster_gm_lm_view_age_seconds{gm="gm0",lm="west"} 5.0', 'tcluster_gm_lm_connected{gm="gm0",lm="east"} 0',
                 'tcluster_gm_lm_free_millicores{gm="gm0",lm="west"} 2000', 'tcluster_gm_lm_epoch{gm="gm0",lm="west"} 7'):
        assert line in samples, line
    # An LM with no state yet has no age (not a made-up 0 or -1).
    assert not any(s.startswith('tcluster_gm_lm_view_age_seconds{gm="gm0",lm="east"}') for s in samples)
    # Every metric has its HELP and TYPE.
    names = {line.split("{")[0] for line in samples}
    assert all(f"# TYPE {n} " in text and f"# HELP {n} " in text for n in names)


def test_the_status_page_lists_every_lm_and_escapes_names() -> None:
    d = daemon()
    d.links[1].name = "<east>"
    page = status_page(snapshot(d, now=100.0))
    assert "tcl-gm gm0 (index 0 of 2 GMs)" in page and "&lt;east&gt;" in page and "<east>" not in page
    assert "<td>west</td><td>10.0.0.1:7070</td><td>yes</td><td>yes</td><td>5.0</td><td>7</td><td>2</td>" in page


def test_http_is_off_by_default_and_must_be_host_port() -> None:
    assert parse(["--lms", "lm0=127.0.0.1:1"]).http == ""
    assert parse(["--lms", "lm0=127.0.0.1:1", "--http", "127.0.0.1:9090"]).http == "127.0.0.1:9090"
    with pytest.raises(ConfigError, match="--http"):
        parse(["--lms", "lm0=127.0.0.1:1", "--http", "nope"])
