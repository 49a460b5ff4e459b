"""A standby master's HTTP (master/web/standby.py): with --http, a standby answers the health
probes (/healthz 200, /readyz 503) and /metrics with tcluster_master_leader 0, so that
sum(tcluster_master_leader) over every master counts the leaders; the API and dashboard are
the leader's. When the leader dies, the standby that takes over serves the dashboard on the
same address: ready, and its gauge 1."""

from __future__ import annotations

import re
import signal
import urllib.error
import urllib.request

import pytest

from testkit.faultcluster import wait_for
from testkit.hacluster import HACluster
from tests.ha.conftest import MakeHA

pytestmark = pytest.mark.system
HTTP = re.compile(r"(?:dashboard on|standby: /healthz, /readyz and /metrics on) (http://127\.0\.0\.1:\d+)/")


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def http_of(c: HACluster, i: int) -> str:
    """Master i's HTTP address, from its log (the dashboard's or the standby's line)."""
    proc = c.masters[i].proc
    assert proc is not None
    return proc.wait_for_output(HTTP.pattern, 30).group(1)


def leader_gauge(url: str) -> float | None:
    status, body = get(url + "/metrics")
    found = re.search(r"^tcluster_master_leader (\S+)$", body, re.M) if status == 200 else None
    return float(found.group(1)) if found else None


def test_a_standby_answers_health_and_metrics_and_serves_the_dashboard_once_it_leads(ha: MakeHA) -> None:
    c = ha(n_masters=2, lease_ttl_s=3, master_extra=("--http", "127.0.0.1:0"))
    leader = c.start_masters()
    standby = 1 - leader
    lead_url, standby_url = http_of(c, leader), http_of(c, standby)

    assert get(standby_url + "/healthz") == (200, "ok: standby\n")
    status, why = get(standby_url + "/readyz")
    assert status == 503 and "standby" in why
    assert leader_gauge(standby_url) == 0.0
    status, metrics = get(standby_url + "/metrics")
    assert 'tcluster_build_info{' in metrics and "process_resident_memory_bytes" in metrics
    status, refused = get(standby_url + "/api/v1/jobs")
    assert status == 503 and "leader" in refused                     # no state on a standby
    assert leader_gauge(lead_url) == 1.0 and get(lead_url + "/readyz")[0] == 200

    c.kill_one(leader, signal.SIGKILL)
    assert c.wait_leader(exclude={leader}, timeout_s=60) == standby
    # The dashboard takes the standby's address over: ready, the gauge 1, the API served.
    wait_for(lambda: leader_gauge(standby_url) == 1.0, 60, "the new leader's gauge at 1")
    assert get(standby_url + "/readyz")[0] == 200
    assert get(standby_url + "/api/v1/jobs")[0] == 200
