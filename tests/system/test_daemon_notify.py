"""The daemons speak systemd's notify protocol to a socket this test binds in place of
systemd's: READY=1 once serving, WATCHDOG=1 from their loops, RELOADING=1/READY=1 around a
SIGHUP that re-reads --config, STOPPING=1; and an agent whose heartbeat loop hangs (the
test-only trigger) stops its pings while its process lives on, which is what makes
systemd's WatchdogSec= restart it (tests/vm shows that restart under systemd itself)."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path
from typing import Iterator

import pytest

from testkit.cgroups import SKIP_REASON, leftovers
from testkit.procs import BIN, Proc, node_subtrees, start_master, sweep_node
from tests.system.cluster import node_name

pytestmark = [pytest.mark.system, pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)]
WATCHDOG_USEC = "2000000"     # pings every 0.5 s at most (a quarter of it)


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[tuple[socket.socket, dict[str, str]]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify.sock"
    sock.bind(str(path))
    yield sock, {"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": WATCHDOG_USEC}
    sock.close()


def messages(sock: socket.socket, until: str, timeout_s: float) -> list[str]:
    """Every line received until one starts with `until` (included), or the timeout."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            lines = sock.recv(4096).decode().split("\n")
        except socket.timeout:
            break
        seen += lines
        if any(line.startswith(until) for line in lines):
            return seen
    raise AssertionError(f"no {until} within {timeout_s}s; got {seen}")


def test_master_ready_watchdog_reload_and_stopping(tmp_path: Path, notify: tuple[socket.socket, dict[str, str]]) -> None:
    sock, env = notify
    conf = tmp_path / "master.toml"
    conf.write_text(f'listen = "127.0.0.1:0"\ndata_dir = "{tmp_path}/m"\nhttp = "off"\n')
    master = Proc([str(BIN / "tcl-master"), "--config", str(conf)], tmp_path / "master.log", env=env)
    try:
        ready = messages(sock, "READY=1", 60)
        assert any(line.startswith("STATUS=leading on port") for line in ready), ready
        messages(sock, "WATCHDOG=1", 10)          # from the scheduling loop
        conf.write_text(conf.read_text() + 'fairness = "drf"\nlog_level = "DEBUG"\n')
        master.popen.send_signal(signal.SIGHUP)
        reload = messages(sock, "READY=1", 20)
        assert any(line == "RELOADING=1" for line in reload), reload
        master.wait_for_output(r"reload: fairness changed; they take effect after a restart", 10)
        master.wait_for_output(r"reload: log level DEBUG", 10)
        master.popen.send_signal(signal.SIGTERM)
        messages(sock, "STOPPING=1", 20)
        assert master.popen.wait(30) == 0
    finally:
        master.stop()


def test_agent_ready_watchdog_and_a_hung_loop_stops_the_pings(tmp_path: Path,
                                                               notify: tuple[socket.socket, dict[str, str]]) -> None:
    sock, env = notify
    master, address = start_master(tmp_path)
    node = node_name("notify")
    hang = tmp_path / "hang"
    conf = tmp_path / "agent.toml"
    conf.write_text(f'master = "{address}"\nnode = "{node}"\ncpus = 1\nmemory = "256Mi"\n'
                    f'state_dir = "{tmp_path / node}"\ntest_hang_file = "{hang}"\n')
    agent = Proc([str(BIN / "tcl-agent"), "--config", str(conf)], tmp_path / "agent.log", env=env)
    try:
        ready = messages(sock, "READY=1", 60)
        assert any(line.startswith(f"STATUS=node {node}: 0 task(s) re-adopted") for line in ready), ready
        agent.wait_for_output("registered with", 60)
        messages(sock, "WATCHDOG=1", 10)          # after a heartbeat went out
        hang.write_text("")
        agent.wait_for_output("test hang: .* appeared; the heartbeat loop stops here", 20)
        time.sleep(0.6)                           # a ping already on its way is let through
        sock.settimeout(0.1)
        while True:                               # drain what came before the hang
            try:
                sock.recv(4096)
            except socket.timeout:
                break
        sock.settimeout(3.0)                      # 1.5 watchdog intervals: systemd would have acted
        with pytest.raises(socket.timeout):
            print(sock.recv(4096))
        assert agent.popen.poll() is None, "hung, not dead: only the watchdog ends it"
        assert not hang.exists()                  # consumed: the restarted agent runs normally
    finally:
        agent.stop(signal.SIGKILL)     # hung: SIGTERM's handler would never run
        master.stop()
        sweep_node(node, tmp_path / node)
        for subtree in node_subtrees(node):   # a killed agent leaves its (empty) tcluster/<node>
            subtree.rmdir()
    assert leftovers(node) == []


def test_doctor_on_this_host_against_a_live_master(tmp_path: Path) -> None:
    """Every check on a real host: cgroups, kernel, shim, the master's port, and the clock
    read from the master's own metadata (the same host: no skew to speak of)."""
    import json
    import subprocess
    master, address = start_master(tmp_path)
    try:
        done = subprocess.run([str(BIN / "tcl"), "doctor", "--master", address, "--state-dir", str(tmp_path / "none"),
                               "-o", "json"], capture_output=True, text=True, timeout=120)
    finally:
        master.stop()
    report = json.loads(done.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert done.returncode == 0 and report["ok"], done.stdout + done.stderr
    assert checks["clock"]["status"] == "OK" and float(checks["clock"]["detail"].split("s ")[0]) < 1.0, checks["clock"]
    assert checks["port"]["detail"] == f"{address} accepts connections"
    assert checks["identity"]["status"] == "SKIP" and checks["shim"]["status"] == "OK"
