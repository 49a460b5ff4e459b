"""tcl-gm through its binary takes SIGHUP as every tcluster daemon does (issue 35: it died
of it silently): it reads its configuration again, says what changed, and keeps serving."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest

from testkit.procs import BIN, Proc

pytestmark = pytest.mark.e2e


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sighup_leaves_the_gm_serving_and_reports_the_reload(tmp_path: Path) -> None:
    port = _port()
    config = tmp_path / "gm.toml"
    config.write_text('queue_map = "a=gm0"\n')
    gm = Proc([str(BIN / "tcl-gm"), "--config", str(config), "--name", "gm0", "--index", "0", "--listen",
               f"127.0.0.1:{port}", "--lms", "lm0=127.0.0.1:1", "--gms", f"gm0=127.0.0.1:{port}",
               "--state-dir", str(tmp_path / "state")], tmp_path / "gm.log")
    try:
        gm.wait_for_output(r"serving on port")
        config.write_text('queue_map = "a=gm0,b=gm0"\n')
        gm.popen.send_signal(signal.SIGHUP)
        gm.wait_for_output(r"SIGHUP: configuration read again; queue_map changed and take effect at the next start")  # noqa: E501
        config.write_text("queue_map = [unclosed\n")
        gm.popen.send_signal(signal.SIGHUP)
        gm.wait_for_output(r"SIGHUP: the configuration is not valid, nothing changed")
        assert gm.popen.poll() is None                   # still serving
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        gm.stop()
