"""The queue file through the real binaries: a bad file stops `tcl-master` naming the
line, SIGHUP reloads a good one, and a bad reload keeps the old tree in force."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from testkit.procs import BIN, Proc, tcl, tcl_json

pytestmark = pytest.mark.e2e
QUEUES = "queues:\n  ads: {weight: 3, queues: {prod: {}, test: {}}}\n  dev: {}\n"


def _leaves(master: str) -> list[str]:
    reply = tcl_json(master, "queues")
    assert isinstance(reply, dict)
    return [q["path"] for q in reply["queues"] if q["leaf"]]


def _wait_for(check, timeout_s: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def test_a_bad_queue_file_stops_the_master_and_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "q.yaml").write_text("queues:\n  ads: {}\n  ads: {}\n")
    result = subprocess.run([str(BIN / "tcl-master"), "--queues", str(tmp_path / "q.yaml"), "--listen", "127.0.0.1:0",
                             "--data-dir", str(tmp_path / "state")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "q.yaml:3: queues.ads: duplicate name (first given at line 2)" in result.stderr


def test_sighup_reloads_the_queue_file_and_keeps_the_old_tree_on_errors(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text(QUEUES)
    master = Proc([str(BIN / "tcl-master"), "--queues", str(path), "--listen", "127.0.0.1:0",
                   "--data-dir", str(tmp_path / "state")], tmp_path / "master.log")
    try:
        address = "127.0.0.1:" + master.wait_for_output(r"listening on 127\.0\.0\.1:(\d+)").group(1)
        assert _leaves(address) == ["ads.prod", "ads.test", "dev"]
        refused = tcl(address, "submit", "--queue", "ads", "--", "true", check=False)
        assert refused.returncode == 1 and "submit to one of: ads.prod, ads.test, dev" in refused.stderr

        path.write_text(QUEUES + "  ops: {weight: 2}\n")
        master.popen.send_signal(signal.SIGHUP)
        _wait_for(lambda: _leaves(address) == ["ads.prod", "ads.test", "dev", "ops"])
        tcl(address, "submit", "--queue", "ops", "--", "true")

        path.write_text("queues:\n  ads: {weight: 0}\n")
        master.popen.send_signal(signal.SIGHUP)
        master.wait_for_output(r"queue reload refused.*q\.yaml:2: queues\.ads\.weight")
        assert _leaves(address) == ["ads.prod", "ads.test", "dev", "ops"]
        assert master.popen.poll() is None   # SIGHUP never stops the master
    finally:
        assert master.stop() == 0
