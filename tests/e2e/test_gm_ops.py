"""tcl-gm is operable through its binary (issue 35): under a Type=notify unit it says READY=1
and pings the watchdog from its placing loop; with --http it serves /metrics (Prometheus
text), /api/v1/status and a status page. One GM (its LM needs not answer) for all checks."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from testkit.procs import BIN, Proc

pytestmark = pytest.mark.e2e


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _messages(sock: socket.socket, want: set[str], timeout_s: float) -> set[str]:
    """What the GM told 'systemd' until every wanted line came (or the time ran out)."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while not want <= seen and time.monotonic() < deadline:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            seen.update(sock.recv(4096).decode().splitlines())
        except socket.timeout:
            break
    return seen


def test_the_gm_notifies_systemd_pings_the_watchdog_and_serves_metrics_and_a_status_page(tmp_path: Path) -> None:
    notify = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify))
    port = _port()
    gm = Proc([str(BIN / "tcl-gm"), "--name", "gm0", "--index", "0", "--listen", f"127.0.0.1:{port}",
               "--lms", "west=127.0.0.1:1", "--queue-map", "a=gm0", "--state-dir", str(tmp_path / "state"),
               "--http", "127.0.0.1:0"], tmp_path / "gm.log",
              env={"NOTIFY_SOCKET": str(notify), "WATCHDOG_USEC": "2000000"})
    try:
        http = int(gm.wait_for_output(r"/metrics and the status page on port (\d+)").group(1))
        # WatchdogSec=2 here: pings at least every 0.5 s; two of them prove the loop pings, not start-up.
        seen = _messages(sock, {"READY=1", "WATCHDOG=1"}, 30)
        assert "READY=1" in seen and "WATCHDOG=1" in seen, seen
        assert "WATCHDOG=1" in _messages(sock, {"WATCHDOG=1"}, 30)
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = r.read().decode()
        assert 'tcluster_gm_info{gm="gm0",index="0"} 1' in text
        assert 'tcluster_gm_lm_connected{gm="gm0",lm="west"} 0' in text          # its LM does not answer
        assert 'tcluster_gm_pending_tasks{gm="gm0"} 0' in text and "tcluster_gm_launches_total" in text
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/api/v1/status", timeout=10) as r:
            status = json.loads(r.read())
        assert (status["name"], status["queues"], [lm["name"] for lm in status["lms"]]) == ("gm0", ["a"], ["west"])
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/", timeout=10) as r:
            assert "tcl-gm gm0" in r.read().decode()
    finally:
        gm.stop()
        sock.close()
