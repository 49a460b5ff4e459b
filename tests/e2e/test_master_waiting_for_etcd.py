"""A master's first start on an etcd that does not answer: it waits (no cached PKI, so
it cannot open its ports yet), says why, and a SIGTERM meanwhile ends it cleanly."""

from __future__ import annotations

import socket
from pathlib import Path

from testkit.procs import BIN, Proc


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_sigterm_while_waiting_for_etcd_exits_0(tmp_path: Path) -> None:
    store = f"etcd://127.0.0.1:{_closed_port()}"
    master = Proc([str(BIN / "tcl-master"), "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "m"),
                   "--store", store], tmp_path / "master.log")
    try:
        master.wait_for_output(r"etcd unreachable .*is a quorum of 127\.0\.0\.1:\d+ up\?", timeout_s=30)
    finally:
        code = master.stop()
    assert code == 0, master.output()[-2000:]
    assert "stopped before it could start" in master.output()
    assert "Traceback" not in master.output()
