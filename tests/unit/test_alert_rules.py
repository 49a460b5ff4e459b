"""The shipped Prometheus alert rules and Grafana dashboard (dashboards/): promtool accepts
the rules, and every series a rule or a panel names is one /metrics exports (rendered here
from a master with every feature that adds series: preemption, GPUs, per-task usage)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tcluster.domain.gpuusage import GpuSample
from tcluster.master.usage.history import HistoryConfig
from tcluster.master.usage.metrics import Exposition
from tcluster.master.usage.recorder import Recorder
from tests.unit.test_history_metrics import _service

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "dashboards" / "prometheus" / "tcluster-alerts.yml"
GRAFANA = ROOT / "dashboards" / "grafana" / "tcluster.json"
SERIES = re.compile(r"\b((?:tcluster|process|python)_[a-zA-Z0-9_]+)")


def _rule_exprs() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


def _panel_exprs() -> list[str]:
    board = json.loads(GRAFANA.read_text())
    return [t["expr"] for p in board["panels"] for t in p["targets"]] + [
        v["query"]["query"] for v in board["templating"]["list"] if v["type"] == "query"]


def _exported() -> set[str]:
    service = _service()
    service.clock = lambda: 100.0
    service.preemption = SimpleNamespace(
        counters=SimpleNamespace(preemptions={("a", "b"): 1}, cpu_seconds=2.0, blocked={}), starved_since={"a": 10.0})
    sample = GpuSample("0000abcd.0", 1, 0, 50.0, 2**30, 80 * 2**30)
    service.gpus = SimpleNamespace(items=lambda: [("n1", sample)])
    recorder = Recorder(HistoryConfig())
    recorder.oom_kills[("n1", "ads.prod")] = 1
    text = Exposition(service, recorder).render().decode()
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(s.name for s in family.samples)
    return names


def test_the_alerts_the_issue_asks_for_are_there() -> None:
    assert {"TclusterNodeDown", "TclusterQueueStarved", "TclusterOOMKillsRising",
            "TclusterSchedulerRoundSlow"} <= set(_rule_exprs())


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (apt-get install prometheus)")
def test_promtool_accepts_the_rules() -> None:
    done = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "SUCCESS: 5 rules found" in done.stdout, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (apt-get install prometheus)")
def test_each_alert_fires_on_its_series_and_not_on_healthy_ones() -> None:
    """dashboards/prometheus/tcluster-alerts.test.yml: promtool's own rule unit tests."""
    done = subprocess.run(["promtool", "test", "rules", RULES.with_suffix(".test.yml").name], cwd=RULES.parent,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_every_series_a_rule_or_a_panel_names_is_exported() -> None:
    exported = _exported()
    named = {(where, name) for where, expr in [*_rule_exprs().items(), *(("grafana", e) for e in _panel_exprs())]
             for name in SERIES.findall(expr)}
    assert len({name for _, name in named}) >= 20          # the scan found the queries' series
    missing = sorted((where, name) for where, name in named if name not in exported)
    assert missing == [], missing


def test_the_placements_panel_plots_a_rate_not_the_counter() -> None:
    exprs = _panel_exprs()
    assert "rate(tcluster_scheduler_placements_total[$__rate_interval])" in exprs
    assert "tcluster_scheduler_placements_total" not in exprs
